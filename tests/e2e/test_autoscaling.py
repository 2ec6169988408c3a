"""The autopilot scales a live fleet on the real node: a backlog on a 12-partition topic makes
the operator add pods (never more than the partitions), the new pods join and the lag drains
with every record handled; once drained, after the scale-down window, it removes pods, which
drain, commit and exit 0 while input goes on, and nothing is lost.

Every record's handler writes a receipt (``examples/load.py``), so records lost and records
handled twice are counted from Kafka, not from pods that are gone; the duplicates are printed
(``-s``) for the note."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka.admin import AdminClient

from tests.e2e.conftest import Release
from tests.e2e.fleet import Cluster, PodWatch, apply, consumer_group, lag, pods
from tests.e2e.load import Replicas, Trickle, produce, tally, topics, worker_env
from tests.infra.waiting import wait_until

pytestmark = pytest.mark.timeout(1200)

PARTITIONS = 12
WORK_S = 0.1  # a record's work: one replica of 4 threads handles 40 records a second
BACKLOG = 9_000  # about 4 minutes of work for one replica
LAG_PER_REPLICA = 200  # the backlog asks for 45 replicas: more than the partitions
CONCURRENCY = 4
DOWN_WINDOW_S = 30


@dataclass
class Scaled:
    name: str
    topic: str
    receipts: str
    replicas: Replicas
    watch: PodWatch
    drained_after_s: float
    top: set[str]  # the pods when the backlog was drained, before any scale-down


@pytest.fixture(scope="module")
def scaled(
    fleet_cluster: Cluster, operator: Release, kafka: str, pod_kafka: str
) -> Iterator[Scaled]:
    """A group of one replica facing a backlog that wants more replicas than partitions, run
    until its lag is 0."""
    admin = AdminClient({"bootstrap.servers": kafka})  # the ``admin`` fixture is per test
    ns, name = operator.watched, "autoscaled"
    topic, receipts = topics(admin, f"load-{name}-{time.time_ns()}", PARTITIONS)
    produce(kafka, topic, PARTITIONS, BACKLOG)
    group = consumer_group(
        name,
        fleet_cluster.images.examples,
        pod_kafka,
        topic,
        handler="load:work",
        concurrency=CONCURRENCY,
        shutdown_grace_s=20,
        autoscaling={
            "min_replicas": 1,
            "max_replicas": 20,
            "lag_per_replica": LAG_PER_REPLICA,
            "scale_down_stabilization_s": DOWN_WINDOW_S,
        },
        tuning={"enabled": False},
        # 12 pods on a 2-core node: requests that fit, as a light handler's would.
        resources={"requests": {"cpu": "50m", "memory": "128Mi"}},
        pod_template={
            **fleet_cluster.placement,
            "worker": {"env": worker_env(pod_kafka, receipts, WORK_S)},
        },
    )
    replicas = Replicas(fleet_cluster.kubeconfig, ns, name)
    watch = PodWatch(fleet_cluster, ns, name)
    started = time.monotonic()
    apply(fleet_cluster, ns, group)
    try:
        drained = lambda: lag(kafka, name, topic, PARTITIONS) == 0  # noqa: E731
        wait_until(drained, 600, "the backlog to drain", every=2)
        took = time.monotonic() - started
        top = {p["metadata"]["name"] for p in pods(fleet_cluster, ns, name)}
        yield Scaled(name, topic, receipts, replicas, watch, took, top)
    finally:
        replicas.stop()
        watch.close()
        fleet_cluster.kubectl("delete", "kcg", "-n", ns, name, "--wait=false", check=False)


def test_a_backlog_scales_the_fleet_up_to_the_partition_count_and_drains_with_nothing_lost(
    scaled: Scaled, fleet_cluster: Cluster, operator: Release, kafka: str
) -> None:
    # From min_replicas 1 with nothing measured, a step adds at most 4 pods or 100 % (the HPA's
    # default policy); once what a replica commits is measured, a step goes straight to the
    # wish, here the partition count (scale_up_in_one_step).
    steps = [1, *scaled.replicas.wished]
    paced_or_whole = [
        b <= max(a + 4, 2 * a) or b == PARTITIONS for a, b in itertools.pairwise(steps)
    ]
    assert all(paced_or_whole), steps
    assert max(steps) == PARTITIONS, f"the fleet went {steps}, not up to the partition count"
    assert steps == sorted(steps), f"the fleet went down while it had a backlog: {steps}"
    # Each new pod joined: receipts came from every pod that ran at the top.
    result = tally(kafka, scaled.topic, scaled.receipts, PARTITIONS)
    assert len(result.pods) >= PARTITIONS, f"only {len(result.pods)} pods handled records"
    assert not result.lost, f"{len(result.lost)} records never handled: {result.lost[:10]}"
    status = fleet_cluster.json("get", "kcg", "-n", operator.watched, scaled.name)["status"]
    print(
        f"\nscale-up: replicas {steps}; {result.expected} records drained in "
        f"{scaled.drained_after_s:.0f} s; {result.duplicates} handled twice; status {status}"
    )
    assert result.duplicates <= len(steps) * PARTITIONS * CONCURRENCY, result.duplicates


def test_once_drained_the_fleet_scales_down_and_the_removed_pods_drain_commit_and_exit_0(
    scaled: Scaled, fleet_cluster: Cluster, operator: Release, kafka: str
) -> None:
    before = tally(kafka, scaled.topic, scaled.receipts, PARTITIONS).duplicates
    top = scaled.top
    assert len(top) == PARTITIONS, f"{len(top)} pods when the backlog was drained: {sorted(top)}"
    # Input goes on while the fleet shrinks, so the removed pods have records in hand.
    trickle = Trickle(kafka, scaled.topic, PARTITIONS, per_s=20)
    try:
        # While the input flows the fleet keeps what it needs to keep up (input x 1.1 over one
        # replica's measured rate): one replica on an idle machine, two when the machine is
        # busy and each replica is measured slower. A bound on "never", not a speed.
        wait_until(
            lambda: scaled.replicas.latest()[0] <= 2,
            60 + 8 * DOWN_WINDOW_S,
            "the fleet down to at most 2 replicas with the input flowing",
        )
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}: the Deployment went {scaled.replicas.wished}, (wished, ready) "
            f"{scaled.replicas.latest()} at the end"
        ) from None
    finally:
        sent = trickle.stop()
    wait_until(
        lambda: scaled.replicas.latest() == (1, 1),
        60 + 4 * DOWN_WINDOW_S,
        "1 replica left once the input stopped",
    )
    removed = {pod for pod in top if pod in scaled.watch.deletion}
    assert len(removed) == len(top) - 1, f"removed {sorted(removed)} of {sorted(top)}"
    wait_until(
        lambda: all((pod, "worker") in scaled.watch.terminated for pod in removed),
        120,
        "every removed worker to exit",
        every=1,
    )
    exits = {pod: scaled.watch.terminated[(pod, "worker")]["exitCode"] for pod in removed}
    assert set(exits.values()) == {0}, exits
    drained = lambda: lag(kafka, scaled.name, scaled.topic, PARTITIONS) == 0  # noqa: E731
    wait_until(drained, 180, "lag 0", every=2)
    result = tally(kafka, scaled.topic, scaled.receipts, PARTITIONS)
    assert not result.lost, f"{len(result.lost)} records never handled: {result.lost[:10]}"
    during = result.duplicates - before
    in_flight = len(removed) * CONCURRENCY  # what the removed pods can have in hand at SIGTERM
    print(
        f"\nscale-down: {len(top)} -> 1 pods while {sent} records came in; "
        f"{during} handled twice (bound {in_flight}); replicas {scaled.replicas.wished}"
    )
    assert during <= in_flight, f"{during} records handled twice, more than in flight"
