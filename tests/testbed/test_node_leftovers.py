"""What a stopped real node left on the machine is what it made and did not undo, never what was
there before it: a bridge a killed run left is used as found and left as found."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.infra import node_cgroups, node_host
from tests.infra.node_runtime import BRIDGE


@pytest.fixture
def clean_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine with the node's bridge on it and nothing else of the node's."""
    monkeypatch.setattr(node_host, "bridge_exists", lambda: True)
    monkeypatch.setattr(node_cgroups, "roots", lambda root: [])
    monkeypatch.setattr(node_host, "processes_naming", lambda workdir: [])
    monkeypatch.setattr(node_host, "leftover_rules", lambda: [])


def test_a_bridge_the_node_found_is_not_a_leftover(clean_machine: None, tmp_path: Path) -> None:
    assert node_host.leftovers(tmp_path, [], {}, bridge_before=True) == []


def test_a_bridge_the_node_made_and_left_is_one(clean_machine: None, tmp_path: Path) -> None:
    assert node_host.leftovers(tmp_path, [], {}) == [f"the {BRIDGE} bridge"]
