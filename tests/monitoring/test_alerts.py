"""The alerts: a valid rule file, each alert tested with ``promtool test rules`` firing and
quiet, labelled with a severity, annotated with a summary and a description, and given a
runbook in the documentation (docs/operate/runbooks.md), under a heading whose anchor is the
alert's name in lower case (the chart's runbookUrl links there)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from tests.infra import prometheus
from tests.monitoring import queries

TESTS = Path(__file__).with_name("alerts.test.yaml")
RULES: list[dict[str, Any]] = [
    rule for group in yaml.safe_load(queries.RULES.read_text())["groups"] for rule in group["rules"]
]
NAMES = [rule["alert"] for rule in RULES]


def _promtool(*args: str, cwd: Path = REPO) -> None:
    done = subprocess.run(
        [prometheus.promtool(), *args], capture_output=True, text=True, cwd=cwd, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_rule_file_is_valid() -> None:
    _promtool("check", "rules", str(queries.RULES))


def test_what_the_alerts_compare_is_valid_promql(tmp_path: Path) -> None:
    """The e2e test runs each alert's signals alone: each must parse on its own."""
    rules = [
        {"record": f"signal:{i}", "expr": signal}
        for i, alert in enumerate(queries.alerts())
        for signal in queries.signals(alert.expr)
    ]
    path = tmp_path / "signals.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "signals", "rules": rules}]}))
    _promtool("check", "rules", str(path))


def test_every_alert_fires_and_stays_quiet_as_its_promtool_tests_say() -> None:
    _promtool("test", "rules", TESTS.name, cwd=TESTS.parent)


def test_every_alert_has_a_test_where_it_fires_and_one_where_it_does_not() -> None:
    cases = [
        case
        for test in yaml.safe_load(TESTS.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
    ]
    fired = {c["alertname"] for c in cases if c.get("exp_alerts")}
    quiet = {c["alertname"] for c in cases if not c.get("exp_alerts")}
    assert set(NAMES) <= fired, f"never fired: {sorted(set(NAMES) - fired)}"
    assert set(NAMES) <= quiet, f"never tested quiet: {sorted(set(NAMES) - quiet)}"


@pytest.mark.parametrize("rule", RULES, ids=NAMES)
def test_every_alert_has_a_severity_a_summary_and_a_description(rule: dict[str, Any]) -> None:
    assert rule["labels"]["severity"] in {"warning", "critical"}
    assert rule["annotations"]["summary"].endswith(".")
    assert rule["annotations"]["description"]


def test_every_alert_has_a_runbook_under_its_name() -> None:
    runbooks = (REPO / "docs" / "operate" / "runbooks.md").read_text()
    headings = set(re.findall(r"^## (Kafleet\w+)$", runbooks, re.MULTILINE))
    assert set(NAMES) <= headings, f"no runbook for {sorted(set(NAMES) - headings)}"
    assert headings <= set(NAMES), f"runbooks of no alert: {sorted(headings - set(NAMES))}"


@pytest.mark.parametrize("rule", RULES, ids=NAMES)
def test_what_every_alert_compares_is_a_query_of_kafleets_families(rule: dict[str, Any]) -> None:
    found = queries.signals(rule["expr"])
    assert found, rule["expr"]
    for signal in found:
        assert queries.names(signal) or signal.startswith("sum by (namespace) (up{"), signal
        assert not re.search(r"(==|!=|>|<)\s*[\d.]+\s*$", signal), signal
        assert not signal.startswith("absent("), signal
