"""The dashboards as TypeScript that Grafana's own published types judge: each part of a
dashboard's JSON, one statement a line, ``satisfies`` the type ``@grafana/schema`` gives it in a
given Grafana release, so ``tsc`` rejects a field that type does not have (an object literal may
carry no unknown property), a value of the wrong type, a missing required field, and a panel type
Grafana has no schema for.

Why this check beside ``schema``: ``@grafana/schema`` (Apache-2.0) is what Grafana generates
from its dashboard and panel schemas for its frontend, released with every Grafana, so it judges
the JSON by Grafana 11.6 and 12.4 themselves rather than by the SDK that wrote it. It is
TypeScript only (no JSON Schema, no CUE), hence ``tsc``. Its dashboard kind leaves panel
options, custom field configs and queries open, so those are checked against the panel
plugins' own types (``raw/composable/<panel>/panelcfg``); a query against ``DataQuery``'s
fields only (Prometheus' query type is in an AGPL package), the SDK checking the rest. Enums
are compared by their values (``Loose``): JSON holds ``"line"``, not ``GraphDrawStyle.Line``.

One allowance: the SDK writes the interval variable's ``auto``, ``auto_count`` and
``auto_min`` on every variable, which Grafana's types have not (Grafana reads them only for an
``interval`` variable); they are left out of the statements (``schema`` checks their types).

Owns: ``program(boards, panel_types)`` (the source, and what each line checks) and
``problems(program, diagnostics)`` (tsc's errors as sentences), pure. Installing and running
``tsc``: ``tests/infra/grafana_schema.py``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

# JSON's view of a type: an enum as the union of its values, the rest alike, field by field.
LOOSE = (
    "type Loose<T> = T extends string ? `${T}` : T extends readonly (infer U)[] ? Loose<U>[]"
    " : T extends object ? { [K in keyof T]: Loose<T[K]> } : T;"
)
SDK_ONLY_VARIABLE_FIELDS = ("auto", "auto_count", "auto_min")
_UNKNOWN = re.compile(
    r"Object literal may only specify known properties, and '\"?(\w+)\"?' does not exist"
)


@dataclass(frozen=True)
class Check:
    """One statement: what it checks, where on its line the JSON starts, and the span of every
    field in it (start, end, path), so a column names the field tsc means."""

    what: str
    start: int
    spans: list[tuple[int, int, str]]

    def path(self, column: int) -> str:
        at = column - 1 - self.start  # tsc counts columns from 1
        inside = [(end - begin, path) for begin, end, path in self.spans if begin <= at < end]
        return min(inside)[1] if inside else ""


@dataclass
class Program:
    """A TypeScript source and, by line (from 1), what that line's statement checks."""

    text: str = ""
    checks: dict[int, Check] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)  # panel types with no types at all


def _literal(value: Any, path: str, at: int, spans: list[tuple[int, int, str]]) -> str:
    """``value`` as JSON (one line, ASCII), noting each field's span from its key on."""
    if not isinstance(value, (dict, list)):
        return json.dumps(value)
    items = value.items() if isinstance(value, dict) else enumerate(value)
    text = "{" if isinstance(value, dict) else "["
    for i, (key, item) in enumerate(items):
        text += ", " if i else ""
        begin = at + len(text)
        if isinstance(value, dict):
            text += json.dumps(key) + ": "
        inner = f"{path}.{key}" if isinstance(value, dict) else f"{path}[{key}]"
        text += _literal(item, inner.lstrip("."), at + len(text), spans)
        spans.append((begin, at + len(text), inner.lstrip(".")))
    return text + ("}" if isinstance(value, dict) else "]")


def _plugin(panel_type: str) -> str:
    return panel_type.replace("-", "")  # state-timeline's types are under statetimeline


def program(boards: dict[str, dict[str, Any]], panel_types: Iterable[str]) -> Program:
    """``boards`` (by file name) as statements for ``tsc``; ``panel_types``: the panel types
    the Grafana has types for, each imported from ``@grafana/schema``'s
    ``raw/composable/<type>/panelcfg`` module by ``tests/infra/grafana_schema``'s paths."""
    known = set(panel_types)
    lines = [
        'import type * as dashboard from "@grafana/schema/raw/dashboard";',
        'import type * as common from "@grafana/schema/common";',
        LOOSE,
    ]
    out = Program()
    used = sorted({_plugin(p["type"]) for b in boards.values() for p in _panels(b)} - {"row"})
    for plugin in used:
        if plugin in known:
            lines.append(f'import type * as panel_{plugin} from "@grafana/schema/panel/{plugin}";')

    def check(what: str, value: Any, type_: str) -> None:
        head = f"export const check{len(lines)} = "
        spans: list[tuple[int, int, str]] = []
        lines.append(f"{head}{_literal(value, '', 0, spans)} satisfies {type_};")
        out.checks[len(lines)] = Check(what, len(head), spans)

    for name, board in boards.items():
        variables = board.get("templating", {}).get("list", [])
        top = {k: v for k, v in board.items() if k != "panels"}
        top["templating"] = {"list": []}
        check(f"{name}: the dashboard", top, "Loose<dashboard.Dashboard>")
        for variable in variables:
            kept = {k: v for k, v in variable.items() if k not in SDK_ONLY_VARIABLE_FIELDS}
            check(f"{name}: variable {variable.get('name')!r}", kept,
                  "Loose<dashboard.VariableModel>")  # fmt: skip
        for panel in _panels(board):
            where = f"{name}: panel {panel.get('id')} {panel.get('title', '')!r}"
            if panel.get("type") == "row":
                check(where, {**panel, "panels": []}, "Loose<dashboard.RowPanel>")
                continue
            plugin = _plugin(str(panel.get("type")))
            if plugin not in known:
                out.missing.append(f"{where}: no panel type {panel.get('type')!r} in the types")
                continue
            rest = {k: v for k, v in panel.items() if k not in ("options", "targets")}
            config = json.loads(json.dumps(panel.get("fieldConfig", {})))
            custom = config.get("defaults", {}).pop("custom", None)
            if "fieldConfig" in panel:
                rest["fieldConfig"] = config
            check(where, rest, "Loose<dashboard.Panel>")
            if "options" in panel:
                check(f"{where} options", panel["options"], f"Loose<panel_{plugin}.Options>")
            if custom is not None:
                check(f"{where} fieldConfig.defaults.custom", custom,
                      f"Loose<panel_{plugin}.FieldConfig>")  # fmt: skip
            for target in panel.get("targets", []):
                check(f"{where} query {target.get('refId')}", target,
                      "Loose<common.DataQuery> & Record<string, unknown>")  # fmt: skip
    out.text = "\n".join(lines) + "\n"
    return out


def _panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for panel in board.get("panels", []):
        found.append(panel)
        found += panel.get("panels", []) if panel.get("type") == "row" else []
    return found


def problems(source: Program, diagnostics: Iterable[Any], grafana: str) -> list[str]:
    """tsc's ``diagnostics`` (``line``, ``column``, ``message``) on ``source`` as sentences
    naming what the line checks, for Grafana ``grafana``."""
    found = [f"{missing} of Grafana {grafana}" for missing in source.missing]
    for diagnostic in diagnostics:
        check = source.checks.get(diagnostic.line)
        what = f"line {diagnostic.line} of the checks" if check is None else check.what
        path = "" if check is None else check.path(diagnostic.column)
        unknown = _UNKNOWN.search(diagnostic.message)
        if unknown:
            path = path.rsplit(".", 1)[0] if path.endswith(f".{unknown[1]}") else ""
            said = f"unknown field {unknown[1]!r}"
        else:
            said = diagnostic.message[:400]
        found.append(f"{what}{' ' + path if path else ''}: {said} (Grafana {grafana}'s types)")
    return found
