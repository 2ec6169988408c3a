"""kafleet's version is written in one place, ``__version__`` in consumer/kafleet/__init__.py
(pyproject.toml, the Makefile's image tags and ``make chart-package`` read it). The files that
must spell it out say the same: the CHANGELOG's newest release and the examples' handler image.
The chart's ``appVersion`` is checked with the chart (tests/operator/test_chart.py)."""

from __future__ import annotations

import re

import kafleet
from tests.conftest import REPO

VERSION = kafleet.__version__
RELEASE = re.compile(r"^## (\d+\.\d+\.\d+\S*) - \d{4}-\d{2}-\d{2}$", re.MULTILINE)


def test_the_changelogs_newest_release_is_kafleets_version() -> None:
    changelog = (REPO / "CHANGELOG.md").read_text()
    releases = RELEASE.findall(changelog)

    assert releases, "CHANGELOG.md has no release section ('## <version> - <yyyy-mm-dd>')"
    assert releases[0] == VERSION, (
        f"CHANGELOG.md's newest release is {releases[0]}, kafleet's version {VERSION}: "
        "a release moves Unreleased into a section of its version"
    )


def test_the_changelog_keeps_an_unreleased_section_above_the_releases() -> None:
    changelog = (REPO / "CHANGELOG.md").read_text()
    newest = RELEASE.search(changelog)

    assert "\n## Unreleased\n" in changelog
    assert newest is not None
    assert changelog.index("\n## Unreleased\n") < newest.start()


def test_the_examples_handler_image_builds_on_kafleets_image_at_its_version() -> None:
    dockerfile = (REPO / "examples" / "Dockerfile").read_text()

    assert re.findall(r"^ARG KAFLEET_IMAGE=(\S+)$", dockerfile, re.MULTILINE) == [
        f"kafleet:{VERSION}"
    ]
    assert set(re.findall(r"\bkafleet(?:-spark)?:(\d\S*)", dockerfile)) == {VERSION}
