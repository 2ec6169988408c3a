"""The alerts page lists every alert of the chart's rule file with its severity, expression
and summary, each linked to its runbook on the Runbooks page."""

from __future__ import annotations

import re
from pathlib import Path

from docgen import alerts
from tests.conftest import REPO


def test_every_alert_is_on_the_page_with_a_link_to_its_runbook() -> None:
    rules = alerts.load()
    text = alerts.page(alerts.alerts(rules))

    names = [r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r]

    assert len(names) > 10
    for name in names:
        assert f"### {name}" in text.splitlines()
        assert f"(../operate/runbooks.md#{name.lower()})" in text


def test_each_runbook_link_lands_on_a_heading_of_the_runbooks_page() -> None:
    runbooks = (REPO / "docs" / "operate" / "runbooks.md").read_text()
    anchors = {h.lower() for h in re.findall(r"^## (\S+)$", runbooks, re.MULTILINE)}

    for alert in alerts.alerts(alerts.load()):
        assert alerts.runbook_link(alert).split("#")[1] in anchors, alert.name


def test_an_alert_shows_its_expression_and_one_without_for_fires_at_once(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        "groups:\n"
        "  - name: g\n"
        "    rules:\n"
        "      - record: job:up:sum\n"
        "        expr: sum(up)\n"
        "      - alert: SomethingWrong\n"
        "        expr: up == 0\n"
        "        labels: {severity: critical}\n"
        "        annotations: {summary: It is down., description: Look <here>.}\n"
    )

    found = alerts.alerts(alerts.load(rules))
    text = alerts.page(found)

    assert [a.name for a in found] == ["SomethingWrong"]
    assert "**critical**, at once. It is down." in text
    assert "```promql\nup == 0\n```" in text
    assert "Look &lt;here&gt;." in text
