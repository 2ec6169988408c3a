"""The fleet observed by a real Prometheus that finds its targets through the real apiserver, as
a cluster's Prometheus does for the chart's ServiceMonitors (``fleet_prometheus``: the operator's
metrics Service and every group's). A PromQL query of a group's lag equals the ConsumerGroup's
``status.lag``, and every family the workers' sidecars and the operator export has series (a
family with no data is a panel with none).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from kafleet.sidecar.metrics import METRICS
from kafleet_operator.reconcile import metrics as operator_metrics
from tests.e2e.conftest import Release
from tests.e2e.fleet import Cluster, apply, consumer_group, lag, wait_pods_ready
from tests.e2e.load import produce, topics, worker_env
from tests.infra import prometheus
from tests.infra.waiting import wait_until

pytestmark = pytest.mark.timeout(900)

PARTITIONS = 4
# Sidecar families that have series only with a sink (Spark): this group has none.
SINK_ONLY = {"partition_held_records"} | {n for n, *_ in METRICS if n.startswith("sink_")}
# Families of share groups only (group_type: share): this group is a consumer group.
SHARE_ONLY = {n for n, *_ in METRICS if n.startswith("share_")}
# What a family's samples are named: gauges as the family, counters with _total, histograms
# and summaries with _bucket, _count, _sum.
SUFFIXES = ("", "_total", "_bucket", "_count", "_sum", "_info")


def _value(server: prometheus.Prometheus, expr: str) -> float | None:
    found = server.query(expr)
    if len(found) != 1:
        return None
    sample: Any = found[0]["value"]
    return float(sample[1])


def test_prometheus_finds_the_pods_through_the_apiserver_and_reads_the_lag_the_status_shows(
    fleet_cluster: Cluster,
    operator: Release,
    admin: AdminClient,
    kafka: str,
    pod_kafka: str,
    fleet_prometheus: prometheus.Prometheus,
) -> None:
    ns, name = operator.watched, "observed"
    topic, receipts = topics(admin, f"load-{name}-{time.time_ns()}", PARTITIONS)
    produce(kafka, topic, PARTITIONS, 40, work_s=0)
    group = consumer_group(
        name,
        fleet_cluster.images.examples,
        pod_kafka,
        topic,
        handler="load:work",
        replicas=2,
        concurrency=2,
        processing_timeout_s=3600,
        shutdown_grace_s=5,
        drain_timeout_s=5,
        tuning={"enabled": False},
        pod_template={
            **fleet_cluster.placement,
            "worker": {"env": worker_env(pod_kafka, receipts)},
        },
    )
    apply(fleet_cluster, ns, group)
    wait_pods_ready(fleet_cluster, ns, name, 2)
    wait_until(lambda: lag(kafka, name, topic, PARTITIONS) == 0, 120, "the first records done")
    # Then a lag that holds still: in each partition, a record whose handler takes an hour,
    # and 25 behind it (ordered by partition, they wait).
    for first in range(PARTITIONS):
        produce(kafka, topic, PARTITIONS, 1, first=40 + first, work_s=3600)
    produce(kafka, topic, PARTITIONS, 25 * PARTITIONS, first=1000)
    expected = 26 * PARTITIONS

    def status_lag() -> Any:
        return fleet_cluster.json("get", "kcg", "-n", ns, name).get("status", {}).get("lag")

    wait_until(lambda: status_lag() == expected, 90, f"status.lag {expected}", every=1)
    queries = {
        "the workers' lag": f'sum(kafleet_lag_records{{group="{name}"}})',
        "the partitions' lag": f'sum(kafleet_partition_lag_records{{consumergroup="{name}"}})',
        "the operator's lag": (
            f'kafleet_operator_lag_records{{namespace="{ns}",consumergroup="{name}"}}'
        ),
    }
    for what, expr in queries.items():
        wait_until(
            lambda expr=expr: _value(fleet_prometheus, expr) == expected,  # type: ignore[misc]
            60,
            f"{what} in Prometheus ({expr}) to equal status.lag {expected}",
            every=1,
        )
    assert status_lag() == expected

    # Every family has series: the sidecars' (but the sink's: this group has none) and the
    # operator's.
    families = {f"kafleet_{n}" for n, *_ in METRICS if n not in SINK_ONLY | SHARE_ONLY}
    revoked = _value(fleet_prometheus, f'sum(kafleet_partitions_revoked_total{{group="{name}"}})')
    if not revoked:  # both workers joined at once: no revoke, so no last drain to show
        families.discard("kafleet_last_revoke_drain_seconds")
    # The group's series; the operator's reconciles carry no group id, and its build_info, its
    # Kafka reads and its status writes no group at all.
    selectors = [
        f'{{__name__=~"kafleet_.+",group="{name}"}}',
        f'{{__name__=~"kafleet_operator_.+",namespace="{ns}",consumergroup="{name}"}}',
        '{__name__=~"kafleet_operator_(build_info|kafka_.+|status_writes_total|shards.*)"}',
    ]
    exported = {
        str(s["metric"]["__name__"])  # type: ignore[index]
        for selector in selectors
        for s in fleet_prometheus.query(selector)
    }

    def missing(wanted: set[str]) -> list[str]:
        return sorted(f for f in wanted if not exported & {f + s for s in SUFFIXES})

    assert not missing(families), f"no series of group {name} for {missing(families)}"
    operator_families = {f._name for f in operator_metrics.EXPORTED}
    assert not missing(operator_families), f"no operator series for {missing(operator_families)}"
    up = {
        tuple(t["labels"].get(label, "") for label in ("namespace", "pod", "consumergroup"))
        for t in fleet_prometheus.targets()
        if t["health"] == "up"
    }
    # By the group's label, not the pod's name: another group's pods may share its prefix.
    workers = {pod for n, pod, group in up if n == ns and group == name}
    assert len(workers) == 2, f"scraped {sorted(up)}: want both of {name}'s workers"
    assert any(n == operator.namespace for n, _, _ in up), f"no operator pod in {sorted(up)}"
    print(f"\nobserved: {len(exported)} kafleet families, {len(operator_families)} operator's")
    fleet_cluster.kubectl("delete", "kcg", "-n", ns, name, "--wait=false")
