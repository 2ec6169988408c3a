"""A share-mode ConsumerGroup on a real node: three pods of the ``spark`` image (a JRE,
JPype and Kafka's Java client, run as non-root on a read-only root filesystem) share ONE
partition, each handling its share at the same time, every record handled once; the sidecar
judges them live and ready without a poll interval, and serves the share counts."""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import AdminClient

from tests.e2e.conftest import Release
from tests.e2e.fleet import Cluster, apply, consumer_group, wait_pods_ready, worker_status
from tests.e2e.load import produce, tally, topics, worker_env
from tests.infra.waiting import wait_until

RECORDS = 600
pytestmark = pytest.mark.timeout(900)


def test_three_share_workers_on_one_partition_each_take_a_share_and_handle_every_record_once(
    fleet_cluster: Cluster, operator: Release, admin: AdminClient, kafka: str, pod_kafka: str
) -> None:
    ns, name = operator.watched, "share-renders"
    topic, receipts = topics(admin, f"load-{name}-{time.time_ns()}", 1)
    group = consumer_group(
        name,
        fleet_cluster.images.examples_spark,
        pod_kafka,
        topic,
        handler="load:work",
        group_type="share",
        replicas=3,
        max_poll_records=8,
        concurrency=8,
        processing_timeout_s=20,
        shutdown_grace_s=10,
        resources={"requests": {"cpu": "50m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
        pod_template={
            **fleet_cluster.placement,
            "worker": {"env": worker_env(pod_kafka, receipts, 0.05)},
        },
    )
    apply(fleet_cluster, ns, group)
    try:
        running = wait_pods_ready(fleet_cluster, ns, name, 3)
        produce(kafka, topic, 1, RECORDS)

        def all_handled() -> bool:
            return not tally(kafka, topic, receipts, 1).lost

        wait_until(all_handled, 300, "every record handled", every=3)
        result = tally(kafka, topic, receipts, 1)
        assert not result.lost
        assert result.duplicates == 0, result.duplicates
        assert set(result.pods) == set(running), result.pods  # each pod took a share
        pods = [
            p
            for p in fleet_cluster.json(
                "get", "pods", "-n", ns, "-l", f"app.kubernetes.io/instance={name}"
            )["items"]
            if not p["metadata"].get("deletionTimestamp")
        ]
        for pod in pods:
            status = worker_status(pod)
            assert status["group_type"] == "share"
            assert status["share"]["largest_poll"] <= 8
            assert status["share"]["archived"] == 0
            assert status["healthy"], status["unhealthy_reasons"]
            log = fleet_cluster.kubectl("logs", "-n", ns, pod["metadata"]["name"], "-c", "worker")
            assert "Traceback" not in log, log[-3000:]
        print(f"\nshare group on one partition: {dict(result.pods)}")
    finally:
        fleet_cluster.kubectl("delete", "kcg", "-n", ns, name, "--wait=false", check=False)
