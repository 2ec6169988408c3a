"""The chart's two operator pods on the real node hand over with nothing lost: the leader
SIGKILLed in the middle of a lag step (its container's process killed on the node, as an OOM
kill does) is replaced by the standby within the Lease's duration and the group still reaches
its size; the leader deleted (SIGTERM) hands over at once. No scale-down happens during either
handover and the replicas only ever go up while the backlog lasts. Prints what it measured.
The same with processes on a bare apiserver, and two shards: ``tests/operator/
test_high_availability.py``."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from kafleet_operator.policy import shards
from tests.e2e import network_cut
from tests.e2e.conftest import EXTERNAL_KUBECONFIG, Release
from tests.e2e.fleet import Cluster, LogFollower, apply, consumer_group, lag
from tests.e2e.load import Replicas, produce, tally, topics, worker_env
from tests.infra.node import RealNode
from tests.infra.waiting import wait_until

pytestmark = pytest.mark.timeout(900)

PARTITIONS = 8
WORK_S = 0.1  # one replica of 4 threads: 40 records a second
BACKLOG = 6_000  # minutes of work for one replica: the step outlives the handover
LAG_PER_REPLICA = 100


@pytest.fixture
def runc_root(fleet_cluster: Cluster, request: pytest.FixtureRequest) -> Path:
    if EXTERNAL_KUBECONFIG:
        pytest.fail(
            "killing the operator's process needs the test bed's real node on this machine",
            pytrace=False,
        )
    node: RealNode = request.getfixturevalue("real_node")
    return network_cut.runc_root(node.workdir)


def leader(cluster: Cluster, release: Release) -> str:
    """The operator pod that holds the only shard's Lease ('' while none does)."""
    found = cluster.kubectl(
        "get", "lease", "-n", release.namespace, shards.lease_name(0, 1), "--ignore-not-found",
        "-o", "json",
    )  # fmt: skip
    return str(json.loads(found)["spec"].get("holderIdentity") or "") if found.strip() else ""


def pod_of(identity: str) -> str:
    """The pod of a Lease holder: its name less the suffix each start adds."""
    return identity.rsplit("-", 1)[0]


def operator_pods(cluster: Cluster, release: Release) -> list[dict[str, Any]]:
    listed = cluster.json(
        "get", "pods", "-n", release.namespace, "-l", "app.kubernetes.io/name=kafleet-operator"
    )
    return list(listed["items"])


@pytest.fixture
def lagging(
    fleet_cluster: Cluster, operator: Release, admin: AdminClient, kafka: str, pod_kafka: str
) -> Iterator[tuple[str, str, str, Replicas]]:
    ns, name = operator.watched, f"handover-{time.time_ns() % 100_000}"
    topic, receipts = topics(admin, f"load-{name}", PARTITIONS)
    group = consumer_group(
        name,
        fleet_cluster.images.examples,
        pod_kafka,
        topic,
        handler="load:work",
        concurrency=4,
        shutdown_grace_s=20,
        autoscaling={
            "min_replicas": 1,
            "max_replicas": PARTITIONS,
            "lag_per_replica": LAG_PER_REPLICA,
        },
        tuning={"enabled": False},
        resources={"requests": {"cpu": "50m", "memory": "128Mi"}},
        pod_template={
            **fleet_cluster.placement,
            "worker": {"env": worker_env(pod_kafka, receipts, WORK_S)},
        },
    )
    apply(fleet_cluster, ns, group)
    replicas = Replicas(fleet_cluster.kubeconfig, ns, name)
    try:
        yield name, topic, receipts, replicas
    finally:
        replicas.stop()
        fleet_cluster.kubectl("delete", "kcg", "-n", ns, name, "--wait=false", check=False)


@pytest.fixture
def operator_logs(
    fleet_cluster: Cluster, operator: Release, tmp_path: Path
) -> Iterator[Callable[[str], str]]:
    """Follows both operator pods' logs from the start (a deleted pod's lines outlive it); the
    callable gives every pod's lines naming a group or a Lease, for a failed assertion."""
    wait_until(lambda: len(operator_pods(fleet_cluster, operator)) == 2, 60, "two operator pods")
    names = [p["metadata"]["name"] for p in operator_pods(fleet_cluster, operator)]
    followers = [
        LogFollower(fleet_cluster, operator.namespace, pod, tmp_path, container="operator")
        for pod in names
    ]

    def told(group: str) -> str:
        texts = [f.text() for f in followers]
        for pod in operator_pods(fleet_cluster, operator):  # a restarted container's own lines
            pod_name = pod["metadata"]["name"]
            args = ("logs", "-n", operator.namespace, pod_name, "-c", "operator")
            texts.append(fleet_cluster.kubectl(*args, check=False))
        lines = [
            line
            for text in texts
            for line in text.splitlines()
            if group in line or "lead" in line or "shard" in line
        ]
        return "\n".join(lines[-150:])

    try:
        yield told
    finally:
        for follower in followers:
            follower.close()


def test_the_leader_killed_mid_lag_step_is_replaced_and_the_group_still_reaches_its_size(
    fleet_cluster: Cluster,
    operator: Release,
    kafka: str,
    runc_root: Path,
    lagging: tuple[str, str, str, Replicas],
    operator_logs: Callable[[str], str],
) -> None:
    name, topic, receipts, replicas = lagging
    first = wait_until(lambda: leader(fleet_cluster, operator), 60, "a leader")
    wait_until(lambda: replicas.latest()[1] >= 1, 180, "the group's first worker ready", every=1)
    produce(kafka, topic, PARTITIONS, BACKLOG)
    stepped = time.monotonic()
    wait_until(lambda: replicas.latest()[0] > 1, 60, "the first scale-up step", every=0.5)
    pods = operator_pods(fleet_cluster, operator)
    (pod,) = [p for p in pods if pod_of(first) == p["metadata"]["name"]]
    os.kill(network_cut.container_pid(runc_root, pod), signal.SIGKILL)
    killed = time.monotonic()
    second = wait_until(
        lambda: (h := leader(fleet_cluster, operator)) != first and h, 60, "another leader"
    )
    took = time.monotonic() - killed
    wait_until(lambda: replicas.latest()[0] == PARTITIONS, 120, "the group at its size", every=1)
    full = time.monotonic() - stepped
    steps = replicas.wished
    assert steps == sorted(steps), f"a scale-down during the handover: {steps}\n" + operator_logs(
        name
    )
    wait_until(lambda: lag(kafka, name, topic, PARTITIONS) == 0, 400, "lag 0", every=2)
    result = tally(kafka, topic, receipts, PARTITIONS)
    assert not result.lost, f"{len(result.lost)} records never handled"
    print(
        f"\nSIGKILL of the leader {first} mid lag step: {second} leads {took:.1f} s after; "
        f"full size {PARTITIONS} {full:.0f} s after the step; replicas {steps}"
    )

    # A clean leave now: the leader's pod deleted (SIGTERM) hands over at once.
    fleet_cluster.kubectl(
        "delete", "pod", "-n", operator.namespace, pod_of(str(second)), "--wait=false"
    )
    deleted = time.monotonic()
    third = wait_until(
        lambda: (h := leader(fleet_cluster, operator)) not in ("", second) and h,
        30,
        "a leader after the SIGTERM",
        every=0.2,
    )
    print(f"SIGTERM of the leader {second}: {third} leads {time.monotonic() - deleted:.1f} s after")
    assert replicas.wished == sorted(replicas.wished), f"{replicas.wished}\n" + operator_logs(name)
    # The tests after this one find two ready operator pods again.
    fleet_cluster.kubectl(
        "rollout", "status", "-n", operator.namespace, "deployment/kafleet-operator",
        "--timeout=120s",
    )  # fmt: skip
