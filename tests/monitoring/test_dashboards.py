"""The dashboards in the chart are what the code builds, every panel is complete (title,
description, the data source variable, a query), and every query names only families kafleet
exports, with labels those series carry, and variables the dashboard defines."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from monitoring.__main__ import DASHBOARDS, FOLDER, main, render
from tests.monitoring import queries

EXPORTED = queries.exported()
BOARDS = [pytest.param(path, id=path.name) for path in queries.DASHBOARDS]


def test_the_chart_holds_exactly_the_dashboards_the_code_builds() -> None:
    assert sorted(p.name for p in queries.DASHBOARDS) == sorted(DASHBOARDS)
    for name, build in DASHBOARDS.items():
        assert (FOLDER / name).read_text() == render(build), (
            f"{name} differs from the code: run `python -m monitoring`"
        )


def test_the_check_names_a_file_that_drifted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("monitoring.__main__.FOLDER", tmp_path)
    assert main([]) == 0
    (tmp_path / "kafleet-fleet.json").write_text("{}")
    assert main(["--check"]) == 1
    assert "kafleet-fleet.json" in capsys.readouterr().err


@pytest.mark.parametrize("path", BOARDS)
def test_every_panel_has_a_unique_id_a_title_a_description_and_the_chosen_data_source(
    path: Path,
) -> None:
    board = json.loads(path.read_text())
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids)), ids
    assert board["uid"]
    assert board["title"].startswith("kafleet / ")
    for panel in board["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["title"], panel
        assert panel["description"], panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel
        assert panel["targets"], panel["title"]


@pytest.mark.parametrize("path", BOARDS)
def test_every_variable_a_query_uses_is_defined(path: Path) -> None:
    defined = {v["name"] for v in queries.variables(path)} | {"__rate_interval"}
    for q in queries.panels(path):
        used = set(re.findall(r"\$(\w+)", q.expr))
        assert used <= defined, f"{q.where}: {sorted(used - defined)} undefined"
    assert {"datasource", "namespace", "consumergroup"} <= defined


def test_the_worker_drill_down_filters_by_pod_and_topic() -> None:
    (path,) = [p for p in queries.DASHBOARDS if p.name == "kafleet-workers.json"]
    assert {"pod", "topic"} <= {v["name"] for v in queries.variables(path)}


@pytest.mark.parametrize("q", [pytest.param(q, id=q.where) for q in queries.every()])
def test_every_query_names_exported_families_and_their_labels(q: queries.Promql) -> None:
    names = queries.names(q.expr)
    assert names, f"{q.where}: no kafleet family in {q.expr}"
    unknown = names - set(EXPORTED)
    assert not unknown, f"{q.where}: {sorted(unknown)} are not exported"
    carried = set.union(*(EXPORTED[n] for n in names))
    missing = queries.labels(q.expr) - carried
    assert not missing, f"{q.where}: no series of {sorted(names)} carries {sorted(missing)}"
    kept = queries.grouped(q.expr)
    shown = q.shown - (kept if kept is not None else carried)
    assert not shown, f"{q.where}: shows {sorted(shown)}, which the query does not keep"
