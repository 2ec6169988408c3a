"""The chart's README travels in its package (``helm package``, then Artifact Hub or ``helm
show readme``), away from the repository: every link it has resolves inside the chart or is a
web address."""

from __future__ import annotations

import re

from tests.conftest import REPO

CHART = REPO / "charts" / "kafleet"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_every_link_of_the_charts_readme_resolves_inside_the_packaged_chart() -> None:
    readme = (CHART / "README.md").read_text()
    outside = []
    for target in LINK.findall(readme):
        if target.startswith(("http://", "https://", "#")):
            continue
        path = (CHART / target.split("#")[0]).resolve()
        if not path.is_relative_to(CHART) or not path.exists():
            outside.append(target)

    assert outside == [], "links that break once the chart is packaged"
