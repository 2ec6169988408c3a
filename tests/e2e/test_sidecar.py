"""The sidecar outlives the worker's drain: it is a native sidecar (an init container with
``restartPolicy: Always``), which the kubelet stops only after the worker has exited, so the
drain's figures can be scraped while it runs (issue 21: as a plain container it got SIGTERM
with the worker and exited at once)."""

from __future__ import annotations

import time
from datetime import datetime

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.e2e.conftest import Release
from tests.e2e.fleet import (
    Cluster,
    PodWatch,
    apply,
    billed,
    consumer_group,
    logs,
    produce_orders,
    wait_pods_ready,
)
from tests.infra.waiting import wait_until

pytestmark = pytest.mark.timeout(900)

SCRAPE = (
    "import urllib.request\n"
    "print(urllib.request.urlopen('http://localhost:8080/metrics', timeout=3).read().decode())"
)


def _at(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def test_the_sidecar_is_stopped_only_after_the_worker_has_drained_and_exited(
    fleet_cluster: Cluster, operator: Release, admin: AdminClient, kafka: str, pod_kafka: str
) -> None:
    ns, name = operator.watched, "drain-metrics"
    topic = f"orders-{name}-{time.time_ns()}"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    produce_orders(kafka, topic, 0, 3000)
    group = consumer_group(
        name,
        fleet_cluster.images.examples,
        pod_kafka,
        topic,
        pod_template=fleet_cluster.placement,
        shutdown_grace_s=40,
    )
    apply(fleet_cluster, ns, group)
    (pod,) = wait_pods_ready(fleet_cluster, ns, name, 1)
    wait_until(lambda: len(billed(logs(fleet_cluster, ns, pod))) >= 50, 120, "billing", every=1)
    page = fleet_cluster.kubectl(
        "exec", "-n", ns, pod, "-c", "sidecar", "--", "python3", "-c", SCRAPE
    )
    assert "kafleet_queued_records" in page, page[:2000]
    watch = PodWatch(fleet_cluster, ns, name)
    wait_until(lambda: pod in watch.seen, 30, "the watch to see the pod", every=0.2)

    fleet_cluster.kubectl("delete", "pod", "-n", ns, pod, "--wait=false")
    wait_until(
        lambda: {(pod, "worker"), (pod, "sidecar")} <= set(watch.terminated),
        120,
        "both containers to exit",
        every=0.5,
    )
    watch.close()

    worker, sidecar = watch.terminated[(pod, "worker")], watch.terminated[(pod, "sidecar")]
    print(f"worker finished {worker['finishedAt']}, sidecar finished {sidecar['finishedAt']}")
    assert worker["exitCode"] == 0, worker
    assert _at(sidecar["finishedAt"]) >= _at(worker["finishedAt"]), (worker, sidecar)
    fleet_cluster.kubectl("delete", "kcg", "-n", ns, name, "--wait=false")
