"""The dashboards fit Grafana's dashboard schema: as the SDK's models carry it (every field
known and of its type, panel options and queries by plugin), and as Grafana 11.6 and 12.4
publish it in ``@grafana/schema``, checked by ``tsc``; a broken one fails naming what broke."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tests.infra import grafana_schema
from tests.monitoring import grafana_types, queries, schema

BOARDS = [pytest.param(path, id=path.name) for path in queries.DASHBOARDS]


def _fleet() -> dict[str, Any]:
    (path,) = [p for p in queries.DASHBOARDS if p.name == "kafleet-fleet.json"]
    board: dict[str, Any] = json.loads(path.read_text())
    return board


def _panel(board: dict[str, Any], panel_type: str) -> dict[str, Any]:
    return next(p for p in board["panels"] if p["type"] == panel_type)


def _typecheck(boards: dict[str, dict[str, Any]], grafana: str, workdir: Path) -> list[str]:
    types = grafana_schema.types(grafana)
    program = grafana_types.program(boards, types.panel_types)
    found = grafana_schema.typecheck(workdir, {"dashboards.ts": program.text}, types)
    return grafana_types.problems(program, found, grafana)


@pytest.mark.parametrize("path", BOARDS)
def test_every_dashboard_fits_the_schema_the_sdk_carries(path: Path) -> None:
    assert schema.problems(json.loads(path.read_text())) == []


def test_the_sdk_schema_names_an_unknown_field_a_wrong_type_and_a_value_outside_an_enum() -> None:
    board = _fleet()
    stat = _panel(board, "stat")
    stat["colour"] = "red"
    stat["gridPos"]["h"] = "4"
    stat["options"]["colorMode"] = "rainbow"
    assert schema.problems(board) == [
        "panel 2 'Lag' gridPos.h: int expected, not str '4'",
        "panel 2 'Lag' options.colorMode: 'rainbow' is none of BigValueColorMode's "
        "['value', 'background', 'background_solid', 'none']",
        "panel 2 'Lag': unknown field 'colour' (not in dashboard.Panel)",
    ]


def test_the_sdk_schema_checks_a_panels_custom_field_config_and_its_queries_by_plugin() -> None:
    board = _fleet()
    series = _panel(board, "timeseries")
    series["fieldConfig"]["defaults"]["custom"]["lineWidth"] = "thick"
    series["targets"][0]["exprr"] = series["targets"][0].pop("expr")
    assert schema.problems(board) == [
        "panel 6 'Lag' fieldConfig.defaults.custom.lineWidth: float expected, not str 'thick'",
        "panel 6 'Lag' targets[0]: no 'expr', which prometheus.Dataquery requires",
        "panel 6 'Lag' targets[0]: unknown field 'exprr' (not in prometheus.Dataquery)",
    ]


def test_the_sdk_schema_refuses_a_panel_type_and_a_data_source_it_has_no_schema_for() -> None:
    board = _fleet()
    series = _panel(board, "timeseries")
    series["type"] = "timeseriez"
    series["datasource"]["type"] = "influx"
    assert schema.problems(board) == [
        "panel 6 'Lag': panel type 'timeseriez' has no schema in the SDK",
        "panel 6 'Lag': data source type 'influx' has no query schema in the SDK",
    ]


@pytest.mark.parametrize("grafana", grafana_schema.GRAFANAS)
def test_every_dashboard_type_checks_against_the_types_grafana_publishes(
    grafana: str, tmp_path: Path
) -> None:
    boards = {path.name: json.loads(path.read_text()) for path in queries.DASHBOARDS}
    assert _typecheck(boards, grafana, tmp_path) == []


def test_grafanas_types_name_the_field_that_is_unknown_or_of_the_wrong_type(
    tmp_path: Path,
) -> None:
    grafana = grafana_schema.GRAFANAS[-1]
    board = _fleet()
    stat = _panel(board, "stat")
    stat["datasource"]["name"] = "Prometheus"
    stat["options"]["colorMode"] = "rainbow"
    series = _panel(board, "timeseries")
    series["fieldConfig"]["defaults"]["custom"]["lineWidth"] = "thick"
    series["fieldConfig"]["defaults"]["custom"]["lineColour"] = "red"
    board["templating"]["list"][1]["type"] = "querry"
    row = board["panels"][0]
    row["panels"] = [copy.deepcopy(series) | {"id": 99, "type": "timeseriez"}]
    found = _typecheck({"broken.json": board}, grafana, tmp_path)
    types = f"(Grafana {grafana}'s types)"
    assert found == [
        f"broken.json: panel 99 'Lag': no panel type 'timeseriez' in the types of "
        f"Grafana {grafana}",
        f"broken.json: variable 'namespace' type: Type '\"querry\"' is not assignable to type "
        f"'VariableType'. Did you mean '\"query\"'? {types}",
        f"broken.json: panel 2 'Lag' datasource: unknown field 'name' {types}",
        f"broken.json: panel 2 'Lag' options colorMode: Type '\"rainbow\"' is not assignable to "
        f'type \'"value" | "background" | "background_solid" | "none"\'. {types}',
        f"broken.json: panel 6 'Lag' fieldConfig.defaults.custom lineWidth: Type 'string' is not "
        f"assignable to type 'number'. {types}",
    ]


def test_a_field_only_the_sdk_knows_is_left_to_the_sdk_schema() -> None:
    board = _fleet()
    variable = board["templating"]["list"][1]
    assert set(grafana_types.SDK_ONLY_VARIABLE_FIELDS) <= set(variable)
    program = grafana_types.program({"b.json": board}, ["stat", "timeseries"])
    assert all(f'"{name}": ' not in program.text for name in grafana_types.SDK_ONLY_VARIABLE_FIELDS)
    variable["auto_count"] = "thirty"
    assert schema.problems(board) == [
        "variable 'namespace' auto_count: int expected, not str 'thirty'"
    ]
