"""What Grafana 11 and 12 need of a dashboard to load it as written, which no schema says: a
schema version they migrate, a valid uid and a title (provisioning refuses a dashboard without
either, or two with the same in one folder), unique panel ids, data sources that resolve, every
``$variable`` defined, and a grid that holds every panel, with none on top of another.

- ``schemaVersion`` in ``SCHEMA_VERSIONS``: from 13, the oldest Grafana 12's dashboard API
  migrates (it refuses older ones), to 41, the version Grafana 11.6 writes (and Grafana 12.0's
  newest): a newer dashboard would carry what 11.6 does not know.
- A data source reference (a panel's, a query's, a variable's) names a ``datasource`` variable
  of its plugin type (``${datasource}``) or a uid given as provisioned; one without a uid is
  whatever the default data source is, which the dashboards do not rely on.
- A variable is one of the dashboard's, or Grafana's own (``GLOBALS``), wherever a query, a
  variable's query or regex, a title, a repeat or a data source uid names it, in any of
  Grafana's syntaxes (``$v``, ``${v}``, ``${v:format}``, ``[[v]]``); variables do not depend on
  each other in a circle.
- ``gridPos``: whole numbers, ``x + w`` at most 24 columns, every panel at least 1 by 1, and no
  two top-level panels (rows included) sharing a cell; a collapsed row's panels are laid out
  when it opens, so they are checked against the grid's width only.
- A field's unit is one Grafana formats (the SDK's list of Grafana's unit ids, or a custom
  ``prefix:``/``suffix:``/``si:``/``count:``/``currency:``/``time:`` unit).

Owns: ``problems(board, provisioned)`` and ``across(boards)``, pure, each problem a sentence
naming the panel or variable. Does not own the schema's structure and types (``schema``,
``grafana_types``) or whether the queries return data (the e2e test, on a real Prometheus).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Collection, Iterator
from typing import Any

from grafana_foundation_sdk.models import units

SCHEMA_VERSIONS = range(13, 42)
GRID_COLUMNS = 24
UID = re.compile(r"[a-zA-Z0-9_-]{1,40}")
# Grafana's global variables (its documentation's "Global variables").
GLOBALS = frozenset({
    "__dashboard", "__from", "__to", "__interval", "__interval_ms", "__name", "__org", "__user",
    "__range", "__range_s", "__range_ms", "__rate_interval", "__rate_interval_ms", "__timezone",
    "timeFilter", "__timeFilter",
})  # fmt: skip
VARIABLE = re.compile(r"\$(\w+)|\$\{(\w+)(?:[:.][^}]*)?\}|\[\[(\w+)(?::[^\]]*)?\]\]")
UNITS = frozenset(v for v in vars(units).values() if isinstance(v, str))
CUSTOM_UNITS = ("prefix:", "suffix:", "si:", "count:", "currency:", "time:")


def problems(board: dict[str, Any], provisioned: Collection[str] = ()) -> list[str]:
    """What would keep Grafana from loading ``board`` as written; ``provisioned``: the uids of
    data sources a Grafana has without the dashboard's variables choosing them."""
    variables = board.get("templating", {}).get("list", [])
    return [
        *_identity(board),
        *_ids(board),
        *_sources(board, variables, provisioned),
        *_variables(board, variables),
        *_layout(board),
        *_units(board),
    ]


def across(boards: dict[str, dict[str, Any]]) -> list[str]:
    """Dashboards provisioned together (``boards`` by file name): no uid or title twice."""
    found = []
    for field in ("uid", "title"):
        seen: dict[Any, str] = {}
        for name, board in boards.items():
            if board.get(field) in seen:
                found.append(f"{name} has the {field} {board[field]!r} of {seen[board[field]]}")
            seen.setdefault(board.get(field), name)
    return found


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside rows too."""
    for panel in board.get("panels", []):
        yield panel
        yield from panel.get("panels", []) if panel.get("type") == "row" else []


def _name(panel: dict[str, Any]) -> str:
    return f"panel {panel.get('id')} {panel.get('title', '')!r}"


def _used(text: Any) -> set[str]:
    return {next(g for g in m.groups() if g) for m in VARIABLE.finditer(str(text))}


def _identity(board: dict[str, Any]) -> list[str]:
    found = []
    version = board.get("schemaVersion")
    if version not in SCHEMA_VERSIONS:
        first, last = SCHEMA_VERSIONS.start, SCHEMA_VERSIONS.stop - 1
        found.append(
            f"schemaVersion {version!r} is outside {first}..{last} (what Grafana 12 migrates, "
            "up to what Grafana 11.6 writes)"
        )
    if not isinstance(board.get("uid"), str) or not UID.fullmatch(board["uid"]):
        found.append(f"uid {board.get('uid')!r} is not 1 to 40 letters, digits, '-' or '_'")
    if not board.get("title"):
        found.append("the dashboard has no title")
    return found


def _ids(board: dict[str, Any]) -> list[str]:
    found, seen = [], set()
    for panel in panels(board):
        if not isinstance(panel.get("id"), int):
            found.append(f"{_name(panel)} has no id")
        elif panel["id"] in seen:
            found.append(f"{_name(panel)}: its id is another panel's too")
        seen.add(panel.get("id"))
    return found


def _sources(
    board: dict[str, Any], variables: list[dict[str, Any]], provisioned: Collection[str]
) -> list[str]:
    chosen = {v["name"]: v.get("query") for v in variables if v.get("type") == "datasource"}
    refs = [(f"variable {v.get('name')!r}", v.get("datasource")) for v in variables]
    for panel in panels(board):
        refs.append((_name(panel), panel.get("datasource")))
        refs += [(f"{_name(panel)} query {t.get('refId')}", t.get("datasource"))
                 for t in panel.get("targets", [])]  # fmt: skip
    found = []
    for where, ref in refs:
        if ref is None:
            continue
        uid = str(ref.get("uid", ""))
        named = _used(uid)
        if not uid:
            found.append(f"{where}: a data source without a uid (whichever is the default)")
        elif named:
            for name in named - set(chosen):
                found.append(f"{where}: data source ${{{name}}} is no data source variable")
            for name in named & set(chosen):
                if chosen[name] != ref.get("type"):
                    found.append(
                        f"{where}: a {ref.get('type')} data source from ${{{name}}}, which "
                        f"chooses {chosen[name]} ones"
                    )
        elif uid not in provisioned:
            found.append(f"{where}: data source uid {uid!r} is not provisioned")
    return found


def _variables(board: dict[str, Any], variables: list[dict[str, Any]]) -> list[str]:
    names = [str(v.get("name")) for v in variables]
    twice = sorted({name for name in names if names.count(name) > 1})
    found = [f"variable {name!r} is defined twice" for name in twice]
    defined = set(names) | GLOBALS
    uses: list[tuple[str, Any]] = []
    depends: dict[str, set[str]] = {}
    for variable in variables:
        query = variable.get("query")
        text = query.get("query", "") if isinstance(query, dict) else query
        own = _used(text) | _used(variable.get("regex", ""))
        depends[str(variable.get("name"))] = own
        uses.append((f"variable {variable.get('name')!r}", own))
    for panel in panels(board):
        own = _used(panel.get("title", ""))
        if panel.get("repeat"):
            own.add(str(panel["repeat"]))
        uses.append((_name(panel), own))
        for target in panel.get("targets", []):
            text = " ".join(str(v) for k, v in target.items() if k != "datasource")
            uses.append((f"{_name(panel)} query {target.get('refId')}", _used(text)))
    for where, used in uses:
        for name in sorted(used - defined):
            found.append(f"{where}: ${name} is not defined")
    for name in depends:
        if _reaches(name, name, depends, set()):
            found.append(f"variable {name!r} depends on itself")
    return found


def _reaches(start: str, name: str, depends: dict[str, set[str]], seen: set[str]) -> bool:
    for other in depends.get(name, set()) - seen:
        seen.add(other)
        if other == start or _reaches(start, other, depends, seen):
            return True
    return False


def _layout(board: dict[str, Any]) -> list[str]:
    found, placed = [], []
    top = {id(panel) for panel in board.get("panels", [])}
    for panel in panels(board):
        pos = panel.get("gridPos")
        if not isinstance(pos, dict) or not all(isinstance(pos.get(k), int) for k in "xywh"):
            found.append(f"{_name(panel)}: gridPos {pos!r} is not four whole numbers x, y, w, h")
            continue
        x, y, w, h = pos["x"], pos["y"], pos["w"], pos["h"]
        if x < 0 or y < 0 or w < 1 or h < 1 or x + w > GRID_COLUMNS:
            found.append(
                f"{_name(panel)}: gridPos x={x} w={w} y={y} h={h} is off the grid "
                f"({GRID_COLUMNS} columns, at least 1 by 1)"
            )
        elif id(panel) in top:
            placed.append((panel, range(x, x + w), range(y, y + h)))
    for (a, ax, ay), (b, bx, by) in itertools.combinations(placed, 2):
        if set(ax) & set(bx) and set(ay) & set(by):
            found.append(f"{_name(b)} ({_cells(bx, by)}) overlaps {_name(a)} ({_cells(ax, ay)})")
    return found


def _cells(columns: range, rows: range) -> str:
    return f"columns {columns.start}-{columns.stop - 1}, rows {rows.start}-{rows.stop - 1}"


def _units(board: dict[str, Any]) -> list[str]:
    found = []
    for panel in panels(board):
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit")
        if unit is not None and unit not in UNITS and not str(unit).startswith(CUSTOM_UNITS):
            found.append(f"{_name(panel)}: unit {unit!r} is not one Grafana formats")
    return found
