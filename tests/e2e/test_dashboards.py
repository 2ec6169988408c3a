"""The chart's dashboards and alerts on real data: the chart installed with every switch on
(ServiceMonitors, PrometheusRule, dashboard ConfigMaps), a real Prometheus scraping the fleet as
the Prometheus Operator would for those ServiceMonitors and evaluating that PrometheusRule, and a
real group of workers with a Spark sink, scaled once so that a revoke has drained. Then every
panel's query, every template variable and what every alert compares return series: a query
that returns nothing is a panel with "No data" or an alert that can never fire, and fails.

No Grafana runs here (its server is AGPL-3.0): that Grafana 11 and 12 load the dashboards as
written is proven without one, against their published schema and what their loader needs
(``tests/monitoring/test_dashboard_schema.py``, ``test_dashboard_loading.py``); here, that every
query they send has data."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.e2e.conftest import Release
from tests.e2e.fleet import Cluster, apply, consumer_group, produce_orders, wait_pods_ready
from tests.infra import prometheus
from tests.infra.waiting import wait_until
from tests.monitoring import queries

pytestmark = pytest.mark.timeout(900)

NAME = "observed-sink"
PARTITIONS = 4


def _has(server: prometheus.Prometheus, expr: str) -> bool:
    found = server.query(expr)
    return bool(found) and any(float(s["value"][1]) > 0 for s in found)  # type: ignore[index]


def _variables(path: Path, values: dict[str, str]) -> list[tuple[str, str, str]]:
    """Each variable of a dashboard as (name, label, series selector), its selector filled."""
    found = []
    for variable in queries.variables(path):
        if variable["type"] != "query":
            continue
        text = variable["query"]["query"]
        match = re.fullmatch(r"label_values\((.*), (\w+)\)", text)
        assert match, f"{path.name}: variable {variable['name']}: {text}"
        found.append((variable["name"], match.group(2), queries.concrete(match.group(1), values)))
    return found


def test_every_panel_variable_and_alert_of_the_chart_returns_series_from_the_real_fleet(
    fleet_cluster: Cluster,
    operator: Release,
    admin: AdminClient,
    kafka: str,
    pod_kafka: str,
    fleet_prometheus: prometheus.Prometheus,
) -> None:
    ns = operator.watched
    topic = f"orders-{NAME}-{time.time_ns()}"
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    produce_orders(kafka, topic, 0, 200)
    group = consumer_group(
        NAME,
        fleet_cluster.images.examples_spark,
        pod_kafka,
        topic,
        replicas=1,
        shutdown_grace_s=5,
        drain_timeout_s=5,
        tuning={"enabled": False},
        pod_template=fleet_cluster.placement,
        spark={"table": "/tmp/observed-delta", "master": "local[1]", "batch": {"linger_ms": 500}},
        resources={"requests": {"memory": "768Mi"}, "limits": {"memory": "1536Mi"}},
    )
    apply(fleet_cluster, ns, group)
    wait_pods_ready(fleet_cluster, ns, NAME, 1)
    where = f'namespace="{ns}", consumergroup="{NAME}"'
    wait_until(
        lambda: _has(fleet_prometheus, f"kafleet_sink_rows_written_total{{{where}}}"),
        300,
        "the sink's first rows in Prometheus",
        every=2,
    )
    # A second replica: the first worker's revoke drains, and a revoke drain time exists.
    fleet_cluster.kubectl("scale", "kcg", "-n", ns, NAME, "--replicas=2")
    wait_pods_ready(fleet_cluster, ns, NAME, 2)
    produce_orders(kafka, topic, 200, 200)
    wait_until(
        lambda: fleet_prometheus.query(f"kafleet_last_revoke_drain_seconds{{{where}}}"),
        180,
        "a revoke's drain time in Prometheus",
        every=2,
    )
    # Rates need two samples in their window: give every series a few.
    time.sleep(10)

    values = {
        "namespace": ns,
        "consumergroup": NAME,
        "pod": ".*",
        "topic": ".*",
        "__rate_interval": "1m",  # Grafana's: 4 scrape intervals at its default 15 s
    }
    empty = []
    for path in queries.DASHBOARDS:
        for q in queries.panels(path):
            expr = queries.concrete(q.expr, values)
            if not fleet_prometheus.query(expr):
                empty.append(f"{q.where}: {q.expr}")
            # As a panel sends it: a range over the last 5 minutes, a point every 15 s.
            elif not fleet_prometheus.query_range(expr, 300, 15):
                empty.append(f"{q.where} (as a range query): {q.expr}")
        for name, label, selector in _variables(path, values):
            found = fleet_prometheus.label_values(label, selector)
            if not found:
                empty.append(f"{path.name}: variable {name} ({label} of {selector})")
    for alert in queries.alerts():
        for signal in queries.signals(alert.expr):
            series = fleet_prometheus.query(signal)
            if not series:
                empty.append(f"{alert.where}: {signal}")
            for s in series:
                labels: Any = s["metric"]
                missing = alert.shown - set(labels)
                if missing:
                    empty.append(f"{alert.where}: {signal} lacks {sorted(missing)}")
    assert not empty, "returned no series:\n" + "\n".join(empty)

    # The rules the PrometheusRule carries evaluate without error on these series.
    def evaluated() -> list[dict[str, Any]]:
        rules = fleet_prometheus.rules()
        return rules if all(r.get("lastEvaluation", "").startswith("2") for r in rules) else []

    rules = wait_until(evaluated, 30, "every rule evaluated", every=1)
    assert {r["name"] for r in rules} == {a.where.removeprefix("alert ") for a in queries.alerts()}
    broken = {r["name"]: r.get("lastError") for r in rules if r["health"] != "ok"}
    assert not broken, broken
    firing = sorted(r["name"] for r in rules if r["state"] != "inactive")
    print(f"\nall {sum(len(queries.panels(p)) for p in queries.DASHBOARDS)} panel queries and "
          f"{len(rules)} alerts returned series; pending or firing: {firing}")  # fmt: skip

    # The dashboards' ConfigMaps in the cluster are the chart's files.
    maps = fleet_cluster.json(
        "get", "configmaps", "-n", operator.namespace, "-l", "grafana_dashboard=1"
    )["items"]
    shipped = {name: json.loads(text) for m in maps for name, text in m["data"].items()}
    assert shipped == {p.name: json.loads(p.read_text()) for p in queries.DASHBOARDS}
    fleet_cluster.kubectl("delete", "kcg", "-n", ns, NAME, "--wait=false")
