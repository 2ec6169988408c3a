"""The dashboards give Grafana 11 and 12 what their loader needs beyond the schema: a schema
version they migrate, unique ids, uids and titles, data sources and variables that resolve, and
a grid every panel fits without overlapping; a broken one fails naming each problem."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.monitoring import loading, queries, schema

BOARDS = [pytest.param(path, id=path.name) for path in queries.DASHBOARDS]


def _fleet() -> dict[str, Any]:
    (path,) = [p for p in queries.DASHBOARDS if p.name == "kafleet-fleet.json"]
    board: dict[str, Any] = json.loads(path.read_text())
    return board


def _panel(board: dict[str, Any], panel_id: int) -> dict[str, Any]:
    return next(p for p in loading.panels(board) if p["id"] == panel_id)


@pytest.mark.parametrize("path", BOARDS)
def test_every_dashboard_loads_as_written_with_no_data_source_provisioned_for_it(
    path: Path,
) -> None:
    assert loading.problems(json.loads(path.read_text())) == []


def test_the_dashboards_provisioned_together_have_distinct_uids_and_titles() -> None:
    assert loading.across({p.name: json.loads(p.read_text()) for p in queries.DASHBOARDS}) == []
    board = _fleet()
    assert loading.across({"a.json": board, "b.json": board}) == [
        "b.json has the uid 'kafleet-fleet' of a.json",
        "b.json has the title 'kafleet / Fleet' of a.json",
    ]


def test_a_broken_dashboard_fails_naming_its_unknown_field_undefined_variable_and_overlap() -> None:
    board = _fleet()
    _panel(board, 2)["colour"] = "red"
    _panel(board, 6)["targets"][0]["expr"] = 'kafleet_operator_lag_records{pod=~"$pod"}'
    _panel(board, 7)["gridPos"]["x"] = 6
    assert schema.problems(board) + loading.problems(board) == [
        "panel 2 'Lag': unknown field 'colour' (not in dashboard.Panel)",
        "panel 6 'Lag' query A: $pod is not defined",
        "panel 7 'Time lag' (columns 6-17, rows 5-12) overlaps panel 6 'Lag' "
        "(columns 0-11, rows 5-12)",
    ]


@pytest.mark.parametrize(
    ("version", "loads"), [(12, False), (13, True), (41, True), (42, False), ("41", False)]
)
def test_the_schema_version_is_one_grafana_12_migrates_and_grafana_11_6_knows(
    version: Any, loads: bool
) -> None:
    board = _fleet()
    board["schemaVersion"] = version
    assert (loading.problems(board) == []) is loads


def test_a_dashboard_needs_a_valid_uid_a_title_and_panel_ids_of_its_own() -> None:
    board = _fleet()
    board["uid"] = "kafleet fleet"
    board["title"] = ""
    _panel(board, 3)["id"] = 2
    del _panel(board, 4)["id"]
    assert loading.problems(board) == [
        "uid 'kafleet fleet' is not 1 to 40 letters, digits, '-' or '_'",
        "the dashboard has no title",
        "panel 2 'Worst time lag': its id is another panel's too",
        "panel None 'Replicas ready / desired' has no id",
    ]


def test_a_data_source_is_a_variable_of_its_plugin_type_or_a_provisioned_uid() -> None:
    board = _fleet()
    _panel(board, 6)["datasource"] = {"type": "prometheus", "uid": "${source}"}
    _panel(board, 7)["datasource"] = {"type": "loki", "uid": "${datasource}"}
    _panel(board, 8)["datasource"] = {"type": "prometheus", "uid": "prom-main"}
    _panel(board, 9)["datasource"] = {"type": "prometheus"}
    assert loading.problems(board) == [
        "panel 6 'Lag': data source ${source} is no data source variable",
        "panel 7 'Time lag': a loki data source from ${datasource}, which chooses prometheus ones",
        "panel 8 'Records in and out': data source uid 'prom-main' is not provisioned",
        "panel 9 'Replicas': a data source without a uid (whichever is the default)",
    ]
    _panel(board, 6)["datasource"]["uid"] = "${datasource}"
    _panel(board, 7)["datasource"]["type"] = "prometheus"
    _panel(board, 9)["datasource"]["uid"] = "prom-main"
    assert loading.problems(board, provisioned={"prom-main"}) == []


def test_variables_are_found_in_every_syntax_and_may_not_depend_on_each_other_in_a_circle() -> None:
    board = _fleet()
    target = _panel(board, 6)["targets"][0]
    target["expr"] = "x{a=~'${namespace:regex}', b='[[consumergroup]]', c='${nope}', d='[[nada]]'}"
    namespace = board["templating"]["list"][1]
    namespace["query"]["query"] = 'label_values(x{consumergroup=~"$consumergroup"}, namespace)'
    assert loading.problems(board) == [
        "panel 6 'Lag' query A: $nada is not defined",
        "panel 6 'Lag' query A: $nope is not defined",
        "variable 'namespace' depends on itself",
        "variable 'consumergroup' depends on itself",
    ]
    assert "$__rate_interval" in json.dumps(board)  # Grafana's own: no problem


def test_every_panel_fits_the_24_columns_and_a_collapsed_rows_panels_only_need_to_fit() -> None:
    board = _fleet()
    _panel(board, 6)["gridPos"].update(x=12, w=13)
    row = board["panels"][0]
    row["collapsed"] = True
    lag = _panel(board, 2)
    row["panels"] = [
        lag | {"id": 99, "gridPos": {"x": 0, "y": 1, "w": 6, "h": 4}},
        lag | {"id": 98, "gridPos": {"x": 20, "y": 1, "w": 6, "h": 4}},
    ]
    # Panel 99 sits where panel 2 does: it is laid out only when its row opens.
    assert loading.problems(board) == [
        "panel 98 'Lag': gridPos x=20 w=6 y=1 h=4 is off the grid (24 columns, at least 1 by 1)",
        "panel 6 'Lag': gridPos x=12 w=13 y=5 h=8 is off the grid (24 columns, at least 1 by 1)",
    ]


def test_a_unit_is_one_grafana_formats() -> None:
    board = _fleet()
    _panel(board, 6)["fieldConfig"]["defaults"]["unit"] = "records"
    _panel(board, 7)["fieldConfig"]["defaults"]["unit"] = "suffix: records"
    assert loading.problems(board) == ["panel 6 'Lag': unit 'records' is not one Grafana formats"]
