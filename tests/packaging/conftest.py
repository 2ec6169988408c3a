"""The packaging tests' fixtures: one build and two fresh virtual environments a module (the
library alone, and with the ``[operator]`` extra), each made once since pip's installs are the
slow part (``installing.py`` makes them)."""

from __future__ import annotations

import pytest

from tests.packaging import installing


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> installing.Dists:
    """The sdist and the wheel of the tree as git knows it, built by ``python -m build``."""
    return installing.build(tmp_path_factory.mktemp("build"))


@pytest.fixture(scope="module")
def installed(dists: installing.Dists, tmp_path_factory: pytest.TempPathFactory) -> installing.Venv:
    """A fresh virtual environment with ``pip install kafleet`` (no extras) from the wheel."""
    return installing.install(dists.wheel, tmp_path_factory.mktemp("library") / "venv")


@pytest.fixture(scope="module")
def installed_with_operator(
    dists: installing.Dists, tmp_path_factory: pytest.TempPathFactory
) -> installing.Venv:
    """A fresh virtual environment with ``pip install 'kafleet[operator]'`` from the wheel."""
    root = tmp_path_factory.mktemp("operator") / "venv"
    return installing.install(dists.wheel, root, extras="operator")
