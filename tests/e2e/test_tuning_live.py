"""Tuning reaches live pods on the real node: with slow handlers the operator lowers
``max_poll_records`` in the group's ConfigMap, the kubelet delivers the file to the running
workers, which apply it within seconds: the same pods (UIDs), no restart, no rebalance (the
workers' rebalance counters stay), and the new value in every worker's ``/status``."""

from __future__ import annotations

import time

import pytest
import yaml
from confluent_kafka.admin import AdminClient

from tests.e2e.conftest import Release
from tests.e2e.fleet import (
    Cluster,
    apply,
    consumer_group,
    pods,
    restarts,
    wait_pods_ready,
    worker_status,
)
from tests.e2e.load import Trickle, produce, topics, worker_env
from tests.infra.waiting import wait_until

pytestmark = pytest.mark.timeout(900)

PARTITIONS = 4
START = 400


def test_a_tuning_step_reaches_the_running_workers_without_a_restart_or_a_rebalance(
    fleet_cluster: Cluster, operator: Release, admin: AdminClient, kafka: str, pod_kafka: str
) -> None:
    ns, name = operator.watched, "tuned-live"
    topic, receipts = topics(admin, f"load-{name}-{time.time_ns()}", PARTITIONS)
    produce(kafka, topic, PARTITIONS, 2_000, work_s=0.2)  # 200 ms a record: slow handlers
    group = consumer_group(
        name,
        fleet_cluster.images.examples,
        pod_kafka,
        topic,
        handler="load:work",
        replicas=2,
        concurrency=4,
        max_poll_records=START,
        tuning={"enabled": False},
        pod_template={
            **fleet_cluster.placement,
            "worker": {"env": worker_env(pod_kafka, receipts)},
        },
    )
    apply(fleet_cluster, ns, group)
    wait_pods_ready(fleet_cluster, ns, name, 2)

    def settled() -> bool:  # both in the group, each with its share of the partitions
        states = [worker_status(p) for p in pods(fleet_cluster, ns, name)]
        return sorted(len(s["assigned"]) for s in states) == [2, 2]

    wait_until(settled, 120, "both workers to own 2 partitions", every=1)
    time.sleep(5)  # a rebalance in progress would still move a counter: let it finish
    before = {p["metadata"]["name"]: p for p in pods(fleet_cluster, ns, name)}
    rebalances = {n: worker_status(p)["rebalances"] for n, p in before.items()}
    assert {worker_status(p)["max_poll_records"] for p in before.values()} == {START}
    trickle = Trickle(kafka, topic, PARTITIONS, per_s=10)  # work all through the test

    # Turn tuning on for the running fleet: a setting of the operator, not of the pods.
    fleet_cluster.kubectl(
        "patch", "kcg", "-n", ns, name, "--type=merge", "-p", '{"spec":{"tuning":{"enabled":true}}}'
    )
    turned_on = time.monotonic()

    def lowered() -> int | None:
        status = fleet_cluster.json("get", "kcg", "-n", ns, name).get("status", {})
        value = status.get("maxPollRecords")
        return value if isinstance(value, int) and value < START else None

    wanted = wait_until(lowered, 120, "the operator to lower max_poll_records", every=1)
    decided = time.monotonic()
    cm = fleet_cluster.json("get", "configmap", "-n", ns, f"{name}-worker")
    assert yaml.safe_load(cm["data"]["worker.yaml"])["max_poll_records"] == wanted, cm["data"]

    def applied() -> bool:
        return all(
            worker_status(p)["max_poll_records"] == wanted for p in pods(fleet_cluster, ns, name)
        )

    wait_until(applied, 150, f"every worker to apply max_poll_records {wanted}", every=1)
    reached = time.monotonic()
    trickle.stop()
    after = {p["metadata"]["name"]: p for p in pods(fleet_cluster, ns, name)}
    assert {n: p["metadata"]["uid"] for n, p in after.items()} == {
        n: p["metadata"]["uid"] for n, p in before.items()
    }, "the pods were replaced"
    assert all(set(restarts(p).values()) == {0} for p in after.values()), [
        restarts(p) for p in after.values()
    ]
    assert {n: worker_status(p)["rebalances"] for n, p in after.items()} == rebalances
    print(
        f"\ntuning: {START} -> {wanted} decided {decided - turned_on:.1f} s after tuning was "
        f"turned on, applied by both workers {reached - decided:.1f} s later"
    )
    fleet_cluster.kubectl("delete", "kcg", "-n", ns, name, "--wait=false")
