"""The PromQL the chart ships, read back from its files: every panel target of the dashboards
and every alert of the rule file, and what each names (metric families and labels). The unit
tests check the names against what kafleet exports; the e2e test runs every query against a real
Prometheus scraping real workers and the operator."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kafleet.sidecar.metrics import METRICS
from kafleet_operator.reconcile import metrics as operator_metrics

CHART = Path(__file__).resolve().parents[2] / "charts" / "kafleet"
DASHBOARDS = sorted((CHART / "dashboards").glob("*.json"))
RULES = CHART / "rules" / "kafleet-alerts.yaml"
# What the scrape adds to the workers' series (the chart's monitors set them), and to any.
SCRAPED = {"namespace", "pod", "consumergroup", "job", "instance"}
_SUFFIXES = {
    "counter": ("_total",),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("_sum", "_count"),
}
_NAME = re.compile(r"\bkafleet_[a-z_]+\b")
_MATCHER = re.compile(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)\s*\"")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_LEGEND = re.compile(r"\{\{\s*\.?([a-zA-Z_]\w*)\s*\}\}")
_ANNOTATION_LABEL = re.compile(r"\$labels\.([a-zA-Z_]\w*)")


@dataclass(frozen=True)
class Promql:
    """A query the chart ships: where it is, the expression, and the labels its text (legend or
    annotations) shows."""

    where: str
    expr: str
    shown: frozenset[str] = frozenset()


def exported() -> dict[str, set[str]]:
    """Every sample name kafleet exports (workers' sidecars and the operator), with its labels
    as Prometheus stores them."""
    names: dict[str, set[str]] = {}
    for name, kind, labels, *_ in METRICS:
        # The workers' counters are named with their _total already.
        for suffix in ("",) if name.endswith("_total") else _SUFFIXES[kind]:
            extra = {"le"} if suffix == "_bucket" else set()
            names[f"kafleet_{name}{suffix}"] = {*labels, *SCRAPED, *extra}
    for family in operator_metrics.EXPORTED:
        kind = family._type
        for suffix in _SUFFIXES["counter" if kind == "counter" else kind]:
            extra = {"le"} if suffix == "_bucket" else set()
            base = family._name
            names[f"{base}{suffix}"] = {*family._labelnames, *SCRAPED, *extra}
    return names


def panels(path: Path) -> list[Promql]:
    """Every target of a dashboard file, named ``<file> / <panel title> / <refId>``."""
    board: dict[str, Any] = json.loads(path.read_text())
    found = []
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            legend = target.get("legendFormat", "")
            found.append(
                Promql(
                    f"{path.name} / {panel['title']} / {target['refId']}",
                    target["expr"],
                    frozenset(_LEGEND.findall(legend)),
                )
            )
    return found


def variables(path: Path) -> list[dict[str, Any]]:
    board: dict[str, Any] = json.loads(path.read_text())
    return list(board["templating"]["list"])


def alerts(path: Path = RULES) -> list[Promql]:
    found = []
    for group in yaml.safe_load(path.read_text())["groups"]:
        for rule in group["rules"]:
            text = " ".join(rule.get("annotations", {}).values())
            found.append(
                Promql(
                    f"alert {rule['alert']}",
                    rule["expr"],
                    frozenset(_ANNOTATION_LABEL.findall(text)),
                )
            )
    return found


def names(expr: str) -> set[str]:
    return set(_NAME.findall(expr))


def labels(expr: str) -> set[str]:
    """The labels an expression filters or groups on."""
    found = set(_MATCHER.findall(expr))
    for group in _GROUPING.findall(expr):
        found |= {label.strip() for label in group.split(",") if label.strip()}
    return found


def grouped(expr: str) -> set[str] | None:
    """The labels the outermost aggregation keeps (``by``), or None if it keeps them all."""
    match = re.match(r"\s*\w+\s+by\s*\(([^)]*)\)", expr)
    if match is None:
        return None
    return {label.strip() for label in match.group(1).split(",") if label.strip()}


# A binary operator with its modifiers (``bool``, ``on (...)``, ``group_left (...)``).
_MODIFIERS = r"(\s+bool)?(\s+(on|ignoring)\s*\([^)]*\))?(\s+group_(left|right)\s*(\([^)]*\))?)?"
_COMPARISON = re.compile(r"(==|!=|>=|<=|>|<)" + _MODIFIERS)
_SET_OPERATOR = re.compile(r"\s(or|and|unless)" + _MODIFIERS + r"\s")


def _top_level(expr: str, pattern: re.Pattern[str]) -> list[str]:
    """``expr`` split where ``pattern`` matches outside parentheses, braces and quotes."""
    parts, depth, start, i, quoted = [], 0, 0, 0, False
    while i < len(expr):
        char = expr[i]
        if char == '"':
            quoted = not quoted
        elif not quoted and char in "({[":
            depth += 1
        elif not quoted and char in ")}]":
            depth -= 1
        elif not quoted and depth == 0 and (match := pattern.match(expr, i)):
            parts.append(expr[start:i])
            start = i = match.end()
            continue
        i += 1
    return [*parts, expr[start:]]


def _closing(expr: str) -> int:
    """Where the parenthesis that opens ``expr`` closes (-1: nowhere)."""
    depth, quoted = 0, False
    for i, char in enumerate(expr):
        if char == '"':
            quoted = not quoted
        elif not quoted and char == "(":
            depth += 1
        elif not quoted and char == ")":
            depth -= 1
            if depth == 0:
                return i
    return -1


def _unwrapped(expr: str) -> str:
    """``expr`` without parentheses that enclose all of it."""
    while expr.startswith("(") and _closing(expr) == len(expr) - 1:
        expr = expr[1:-1].strip()
    return expr


def signals(expr: str) -> list[str]:
    """What an alert compares: its expression without thresholds, set operators, enclosing
    parentheses or ``absent()``, each part a query that returns series whenever the families
    exist, firing or not (``a > 0 or (b != c)`` gives ``a``, ``b`` and ``c``)."""
    expr = _unwrapped(expr.strip())
    for pattern in (_SET_OPERATOR, _COMPARISON):
        parts = _top_level(expr, pattern)
        if len(parts) > 1:
            return [s for part in parts if not re.fullmatch(r"\s*[\d.]+\s*", part)
                    for s in signals(part)]  # fmt: skip
    if expr.startswith("absent(") and expr.endswith(")"):
        return signals(expr[len("absent(") : -1])
    return [expr]


def concrete(expr: str, values: dict[str, str]) -> str:
    """The expression as Grafana sends it: each ``$variable`` replaced by its value."""
    for name in sorted(values, key=len, reverse=True):
        expr = expr.replace(f"${name}", values[name])
    return expr


def every() -> list[Promql]:
    return [q for path in DASHBOARDS for q in panels(path)] + alerts()
