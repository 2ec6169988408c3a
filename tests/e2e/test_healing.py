"""The fleet heals on the real node. A handler that hangs makes its worker's ``/healthz`` answer
503; the kubelet restarts that worker's container, which rejoins as the same static member
within the session timeout, so the other worker sees no rebalance, and the group's lag
recovers. A pod deleted by hand is replaced; its partitions come back to the group and nothing
is lost. Receipts (``examples/load.py``) count what was handled, from Kafka."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from tests.e2e.conftest import Release
from tests.e2e.fleet import (
    Cluster,
    apply,
    consumer_group,
    lag,
    pods,
    restarts,
    wait_pods_ready,
    worker_status,
)
from tests.e2e.load import Trickle, produce, tally, topics, worker_env
from tests.infra.waiting import wait_until

pytestmark = pytest.mark.timeout(900)

PARTITIONS = 4
SESSION_MS = 90_000  # covers the hang's detection (10 s + 3 probes of 10 s) and the restart


def _group(
    cluster: Cluster, name: str, topic: str, receipts: str, pod_kafka: str, static: bool
) -> Any:
    membership: dict[str, Any] = {}
    if static:
        membership = {
            "static_membership": True,
            "session_timeout_ms": SESSION_MS,
            "max_poll_interval_ms": 2 * SESSION_MS,
        }
    return consumer_group(
        name,
        cluster.images.examples,
        pod_kafka,
        topic,
        handler="load:work",
        replicas=2,
        concurrency=4,
        processing_timeout_s=10,
        shutdown_grace_s=5,
        drain_timeout_s=5,
        tuning={"enabled": False},
        pod_template={**cluster.placement, "worker": {"env": worker_env(pod_kafka, receipts)}},
        **membership,
    )


def _settled(cluster: Cluster, ns: str, name: str) -> dict[str, dict[str, Any]]:
    def split() -> bool:
        states = [worker_status(p) for p in pods(cluster, ns, name)]
        return sorted(len(s["assigned"]) for s in states) == [2, 2]

    wait_until(split, 180, "both workers to own 2 partitions", every=1)
    time.sleep(5)  # let a rebalance in progress end before counters are read
    return {p["metadata"]["name"]: p for p in pods(cluster, ns, name)}


class HealthWatch:
    """``/healthz`` of one pod, read every second: the answers it gave."""

    def __init__(self, pod: dict[str, Any]) -> None:
        self.codes: list[int] = []
        self.reasons: list[str] = []
        self.first_failure: float | None = None  # monotonic
        self._url = f"http://{pod['status']['podIP']}:8080/healthz"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with urllib.request.urlopen(self._url, timeout=3) as response:
                    self.codes.append(response.status)
            except urllib.error.HTTPError as exc:
                self.codes.append(exc.code)
                self.reasons.append(exc.read().decode(errors="replace"))
                if self.first_failure is None:
                    self.first_failure = time.monotonic()
            except OSError:
                pass
            self._stop.wait(1.0)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def test_a_hung_handler_restarts_its_worker_which_rejoins_with_no_rebalance_for_the_others(
    fleet_cluster: Cluster, operator: Release, admin: AdminClient, kafka: str, pod_kafka: str
) -> None:
    ns, name = operator.watched, "healing"
    topic, receipts = topics(admin, f"load-{name}-{time.time_ns()}", PARTITIONS)
    produce(kafka, topic, PARTITIONS, 200)
    apply(fleet_cluster, ns, _group(fleet_cluster, name, topic, receipts, pod_kafka, True))
    wait_pods_ready(fleet_cluster, ns, name, 2)
    before = _settled(fleet_cluster, ns, name)
    (hung, hung_pod), (other, other_pod) = sorted(before.items())
    owned = worker_status(hung_pod)["assigned"]
    other_rebalances = worker_status(other_pod)["rebalances"]
    partition = int(owned[0].rsplit("[", 1)[1].rstrip("]"))
    trickle = Trickle(kafka, topic, PARTITIONS, per_s=10)
    health = HealthWatch(hung_pod)
    # One record that hangs its handler, the first time only (a mark in the pod's /tmp).
    produce(kafka, topic, PARTITIONS, 1, first=partition, work_s=3600, once=True)
    hung_at = time.monotonic()
    try:

        def restarted() -> bool:
            found = [p for p in pods(fleet_cluster, ns, name) if p["metadata"]["name"] == hung]
            return bool(found) and restarts(found[0]).get("worker", 0) >= 1

        wait_until(restarted, 180, "the kubelet to restart the hung worker", every=1)
        restarted_at = time.monotonic()
        wait_pods_ready(fleet_cluster, ns, name, 2)
    finally:
        health.stop()
        sent = trickle.stop()
    assert 503 in health.codes, f"/healthz never failed: {health.codes}"
    assert any("processing_timeout_s" in r for r in health.reasons), health.reasons[:3]
    after = {p["metadata"]["name"]: p for p in pods(fleet_cluster, ns, name)}
    assert set(after) == set(before), "a pod was replaced, not restarted in place"
    assert restarts(after[hung]) == {"sidecar": 0, "worker": 1}, restarts(after[hung])
    assert restarts(after[other]) == {"sidecar": 0, "worker": 0}, restarts(after[other])
    wait_until(
        lambda: worker_status(after[hung])["assigned"] == owned,
        60,
        f"the restarted worker to get its partitions {owned} back",
        every=1,
    )
    assert worker_status(after[other])["rebalances"] == other_rebalances, "the other rebalanced"
    recovered_lag = lambda: lag(kafka, name, topic, PARTITIONS) == 0  # noqa: E731
    wait_until(recovered_lag, 180, "the group's lag to recover", every=2)
    recovered = time.monotonic() - restarted_at
    result = tally(kafka, topic, receipts, PARTITIONS)
    assert not result.lost, f"{len(result.lost)} records never handled: {result.lost[:10]}"
    failed_after = (health.first_failure or hung_at) - hung_at
    print(
        f"\nhealing: /healthz 503 {failed_after:.0f} s after the hang, {hung} restarted in "
        f"place {restarted_at - hung_at:.0f} s after it; lag 0 {recovered:.0f} s later; "
        f"{sent} records written meanwhile, {result.duplicates} handled twice"
    )
    fleet_cluster.kubectl("delete", "kcg", "-n", ns, name, "--wait=false")


def test_a_pod_deleted_by_hand_is_replaced_and_the_group_recovers_with_nothing_lost(
    fleet_cluster: Cluster, operator: Release, admin: AdminClient, kafka: str, pod_kafka: str
) -> None:
    ns, name = operator.watched, "deleted-pod"
    topic, receipts = topics(admin, f"load-{name}-{time.time_ns()}", PARTITIONS)
    produce(kafka, topic, PARTITIONS, 400)
    # Dynamic membership (the default): the deleted pod's worker leaves the group as it stops,
    # so its partitions move at once (a static member's would wait for its session timeout).
    apply(fleet_cluster, ns, _group(fleet_cluster, name, topic, receipts, pod_kafka, False))
    wait_pods_ready(fleet_cluster, ns, name, 2)
    before = _settled(fleet_cluster, ns, name)
    victim = sorted(before)[0]
    trickle = Trickle(kafka, topic, PARTITIONS, per_s=20)
    try:
        fleet_cluster.kubectl("delete", "pod", "-n", ns, victim, "--wait=false")
        deleted_at = time.monotonic()
        wait_until(
            lambda: victim not in {p["metadata"]["name"] for p in pods(fleet_cluster, ns, name)},
            120,
            "the deleted pod to go",
            every=1,
        )
        wait_pods_ready(fleet_cluster, ns, name, 2)
        time.sleep(10)  # input goes on with the replacement in the group
    finally:
        sent = trickle.stop()
    wait_until(
        lambda: lag(kafka, name, topic, PARTITIONS) == 0,
        180,
        "the group's lag to recover",
        every=2,
    )
    recovered = time.monotonic() - deleted_at
    result = tally(kafka, topic, receipts, PARTITIONS)
    assert not result.lost, f"{len(result.lost)} records never handled: {result.lost[:10]}"
    print(
        f"\npod deleted: the group was back at lag 0 {recovered:.0f} s later; {sent} records "
        f"written meanwhile, {result.duplicates} handled twice"
    )
    fleet_cluster.kubectl("delete", "kcg", "-n", ns, name, "--wait=false")
