"""The alerts' reference page, from the chart's Prometheus rule file.

Owns: reading ``charts/kafleet/rules/kafleet-alerts.yaml`` (the rules the chart's
PrometheusRule carries) into one entry per alert: its group, name, severity, how long its
condition must hold (``for``), expression, summary and description, and the link to its runbook
on the Runbooks page, whose heading for an alert is the alert's name (so its anchor,
``markdown.anchor``, is the name in lower case, as the chart's ``runbookUrl`` links too).
``page()`` is the Markdown.

Does not own the rules (the chart's file, tested with ``promtool test rules``) or the runbooks'
prose (``docs/operate/runbooks.md``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from docgen import markdown

__all__ = ["RULES", "RUNBOOKS", "Alert", "alerts", "load", "page", "runbook_link"]

RULES = (
    Path(__file__).resolve().parent.parent / "charts" / "kafleet" / "rules" / "kafleet-alerts.yaml"
)
# The Runbooks page, from this page (reference/alerts.md).
RUNBOOKS = "../operate/runbooks.md"


@dataclass(frozen=True)
class Alert:
    """One alerting rule."""

    group: str
    name: str
    severity: str
    for_: str  # "" when it fires at once
    expr: str
    summary: str
    description: str


def load(path: Path = RULES) -> dict[str, Any]:
    """The rule file."""
    rules: dict[str, Any] = yaml.safe_load(path.read_text())
    return rules


def alerts(rule_file: Mapping[str, Any]) -> list[Alert]:
    """Every alerting rule of the file, in its order (recording rules left out)."""
    found = []
    for group in rule_file.get("groups") or []:
        for rule in group.get("rules") or []:
            if "alert" not in rule:
                continue
            notes = rule.get("annotations") or {}
            found.append(
                Alert(
                    group=str(group.get("name", "")),
                    name=str(rule["alert"]),
                    severity=str((rule.get("labels") or {}).get("severity", "")),
                    for_=str(rule.get("for", "")),
                    expr=str(rule["expr"]).strip(),
                    summary=str(notes.get("summary", "")),
                    description=str(notes.get("description", "")),
                )
            )
    return found


def runbook_link(alert: Alert) -> str:
    """The runbook's address from this page: the Runbooks page at the alert's anchor."""
    return f"{RUNBOOKS}#{markdown.anchor(alert.name)}"


INTRO = """\
# Alerts

Every alert kafleet ships, generated at each build of this site from the chart's rule file
(`charts/kafleet/rules/kafleet-alerts.yaml`; the chart's PrometheusRule carries it when
`prometheusRule.enabled`). Each has a runbook: what it means and what to do, on the
[Runbooks](../operate/runbooks.md) page. In a description, `{{ $labels.x }}` and `{{ $value }}`
are filled in by Prometheus when the alert fires.
"""


def _section(alert: Alert) -> str:
    held = f", after its condition holds for {alert.for_}" if alert.for_ else ", at once"
    lines = [
        f"### {alert.name}\n",
        f"**{alert.severity or 'no severity'}**{held}. {markdown.prose(alert.summary)}\n",
        markdown.prose(alert.description) + "\n",
        "```promql",
        alert.expr,
        "```\n",
        f"Runbook: [{alert.name}]({runbook_link(alert)}).\n",
    ]
    return "\n".join(lines)


def page(found: list[Alert]) -> str:
    """The alerts' reference page, Markdown."""
    rows = [
        [f"[{a.name}](#{markdown.anchor(a.name)})", a.severity, a.for_ or "at once",
         markdown.prose(a.summary), f"[runbook]({runbook_link(a)})"]
        for a in found
    ]  # fmt: skip
    parts = [INTRO, markdown.table(["Alert", "Severity", "For", "Summary", "Runbook"], rows)]
    groups = dict.fromkeys(a.group for a in found)
    for group in groups:
        parts.append(f"## {group}\n")
        parts += [_section(a) for a in found if a.group == group]
    return "\n".join(parts)


def build() -> str:
    """The page from the chart's rule file."""
    return page(alerts(load()))
