"""The vocabulary every kafleet dashboard is written in: the data source and template variables,
a query, and the few panel kinds (time series, stat, state timeline) with kafleet's defaults.

Owns: how a panel looks and which variables filter it (``namespace``, ``consumergroup``,
``pod``, ``topic``; multi-valued, with "All" meaning ``.*``, so every query filters with
``=~``). Does not own what a dashboard shows (``fleet.py``, ``workers.py``).

The labels the queries rely on: the workers' series carry ``group`` (the Kafka group id) and
get ``namespace``, ``pod`` and ``consumergroup`` (the ConsumerGroup's name, from the pod's
``app.kubernetes.io/instance`` label) from the scrape, as the chart's monitors set them; the
operator's series carry ``namespace``, ``consumergroup`` and ``group`` themselves (scraped with
``honorLabels``).
"""

from __future__ import annotations

from dataclasses import dataclass

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import prometheus, stat, statetimeline, timeseries
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DataSourceRef,
    Panel,
    ValueMap,
    ValueMappingResult,
    VariableOption,
    VariableRefresh,
    VariableSort,
)

DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
# What every query of a group filters on, and of a worker too.
GROUP = 'namespace=~"$namespace", consumergroup=~"$consumergroup"'
WORKER = f'{GROUP}, pod=~"$pod"'
PARTITION = f'{WORKER}, topic=~"$topic"'
RATE = "$__rate_interval"
WIDTH, HEIGHT = 12, 8
# Any panel, as a dashboard takes it.
AnyPanel = Builder[Panel]


@dataclass(frozen=True)
class Query:
    """A PromQL expression and the legend of its series (Grafana's ``{{label}}`` template)."""

    expr: str
    legend: str = ""


def datasource_variable() -> dash.DatasourceVariable:
    return (
        dash.DatasourceVariable("datasource")
        .label("Data source")
        .type("prometheus")
        .current(VariableOption(selected=True, text="Prometheus", value="prometheus"))
    )


def label_variable(name: str, label: str, query: str) -> dash.QueryVariable:
    """A variable of a label's values (``label_values(<series>, <label>)``), several at once or
    All (``.*``)."""
    return (
        dash.QueryVariable(name)
        .label(label)
        .datasource(DATASOURCE)
        .query({"query": query, "refId": name})
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
        .current(VariableOption(selected=True, text="All", value="$__all"))
    )


def dashboard(uid: str, title: str, description: str) -> dash.Dashboard:
    return (
        dash.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["kafleet", "kafka"])
        .editable()
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .refresh("30s")
        .time("now-1h", "now")
        .timezone("browser")
    )


def _targets(queries: tuple[Query, ...]) -> list[prometheus.Dataquery]:
    return [
        prometheus.Dataquery()
        .expr(q.expr)
        .legend_format(q.legend or "__auto")
        .ref_id(chr(ord("A") + i))
        .datasource(DATASOURCE)
        for i, q in enumerate(queries)
    ]


def series(
    title: str,
    description: str,
    unit: str,
    *queries: Query,
    bars: bool = False,
    width: int = WIDTH,
) -> timeseries.Panel:
    """A time series panel; ``bars`` for counts of events per interval."""
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .targets(_targets(queries))  # type: ignore[arg-type]
        .unit(unit)
        .min(0)
        .span(width)
        .height(HEIGHT)
        .fill_opacity(10)
        .legend(
            common_builders.VizLegendOptions()
            .display_mode(common.LegendDisplayMode.TABLE)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
            .calcs(["lastNotNull", "max"])
        )
        .tooltip(common_builders.VizTooltipOptions().mode(common.TooltipDisplayMode.MULTI))
    )
    if bars:
        panel = panel.draw_style(common.GraphDrawStyle.BARS).fill_opacity(80)
    return panel


def single(title: str, description: str, unit: str, *queries: Query, width: int = 6) -> stat.Panel:
    """A stat panel: the last value of each series."""
    return (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .targets(_targets(queries))  # type: ignore[arg-type]
        .unit(unit)
        .span(width)
        .height(4)
        .graph_mode(common.BigValueGraphMode.AREA)
        .color_mode(common.BigValueColorMode.VALUE)
        .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"]))
    )


def states(
    title: str, description: str, names: dict[int, tuple[str, str]], *queries: Query
) -> statetimeline.Panel:
    """A state timeline: each series' value over time, named and coloured (``names``: value ->
    (text, colour))."""
    mapping = ValueMap(
        {str(v): ValueMappingResult(text=text, color=color) for v, (text, color) in names.items()}
    )
    return (
        statetimeline.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .targets(_targets(queries))  # type: ignore[arg-type]
        .mappings([mapping])
        .span(24)
        .height(HEIGHT)
        .show_value(common.VisibilityMode.NEVER)
        .fill_opacity(80)
    )
