"""Several real ``kafleet operator`` processes on one real kube-apiserver share the groups
through Leases (``--shards``): a standby writes nothing while the leader lives and leads once
the killed leader's Lease expires; a leader that leaves cleanly (SIGTERM) hands over at the
standby's next step; with two shards two pods split the groups, each reconciling and exporting
only its own, and a lost pod's shard moves to the other. Each test prints what it measured.
The same on the real node, with the chart: ``tests/e2e/test_operator_handover.py``."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from functools import partial

from prometheus_client.parser import text_string_to_metric_families

from kafleet_operator.policy import leases, shards
from tests.conftest import K8s, TopicFactory
from tests.infra.waiting import wait_until
from tests.operator.conftest import Operator, apply_ready, consumer_group
from tests.operator.test_scaling_and_tuning import replicas

KINDS = "consumergroups,deployments,configmaps,services"


def elected(
    operator: Callable[..., Operator], namespace: str, identity: str, count: int
) -> Operator:
    return operator(
        args=["--shards", str(count), "--lease-namespace", namespace, "--identity", identity]
    )


def holder(k8s: K8s, namespace: str, shard: int, count: int) -> str:
    text = k8s.kubectl(
        "get",
        "-n",
        namespace,
        "lease",
        shards.lease_name(shard, count),
        "--ignore-not-found",
        "-o",
        "json",
    )
    return str(json.loads(text)["spec"].get("holderIdentity") or "") if text.strip() else ""


def versions(k8s: K8s, namespace: str) -> dict[str, str]:
    """Every group's and owned object's resourceVersion: any write changes one."""
    listed = json.loads(k8s.kubectl("get", "-n", namespace, KINDS, "-o", "json"))
    return {
        f"{o['kind']}/{o['metadata']['name']}": o["metadata"]["resourceVersion"]
        for o in listed["items"]
    }


def observed_groups(op: Operator) -> set[str] | None:
    """The groups whose series this operator exports (it observes only the groups it leads);
    None while it does not serve its metrics yet."""
    url = f"http://127.0.0.1:{op.metrics_port}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            text = answer.read().decode()
    except OSError:
        return None
    return {
        sample.labels["consumergroup"]
        for family in text_string_to_metric_families(text)
        if family.name == "kafleet_operator_replicas_desired"
        for sample in family.samples
    }


def exports(op: Operator, groups: set[str]) -> bool:
    return observed_groups(op) == groups


def scale(k8s: K8s, namespace: str, name: str, count: int) -> None:
    k8s.kubectl("scale", "-n", namespace, f"kcg/{name}", f"--replicas={count}")


def test_a_standby_writes_nothing_and_leads_once_the_killed_leaders_lease_expires(
    k8s: K8s,
    namespace: str,
    kafka: str,
    topic_factory: TopicFactory,
    operator: Callable[..., Operator],
) -> None:
    topic = topic_factory(partitions=2)
    leader = elected(operator, namespace, "op-a", 1)
    wait_until(lambda: holder(k8s, namespace, 0, 1) == "op-a", 30, "op-a leads", every=0.2)
    names = [f"ha{i}" for i in range(3)]
    for name in names:
        apply_ready(k8s, namespace, consumer_group(name, kafka, topic))
    standby = elected(operator, namespace, "op-b", 1)
    wait_until(lambda: observed_groups(standby) == set(), 30, "the standby's metrics")
    time.sleep(3)  # the standby's kopf has resumed every group by now
    before = versions(k8s, namespace)
    time.sleep(8)  # eight passes of the leader, eight of the standby
    assert versions(k8s, namespace) == before, "a write at rest (the leader's or the standby's)"
    assert observed_groups(standby) == set()
    assert observed_groups(leader) == set(names)

    assert leader.proc is not None
    leader.proc.kill()
    killed = time.monotonic()
    wait_until(lambda: holder(k8s, namespace, 0, 1) == "op-b", 40, "op-b leads", every=0.2)
    took = time.monotonic() - killed
    scale(k8s, namespace, "ha0", 2)
    scaled = time.monotonic()
    wait_until(lambda: replicas(k8s, namespace, "ha0") == 2, 30, "op-b applies", every=0.2)
    applied = time.monotonic() - scaled
    wait_until(lambda: observed_groups(standby) == set(names), 15, "op-b observes every group")
    print(f"SIGKILL: op-b leads {took:.1f} s after; an edit applied {applied:.1f} s after that")
    # The Lease's duration and two steps (policy/leases.py), and slack for a busy machine.
    assert took < leases.DURATION_S + 2 * leases.RETRY_S + 5


def test_a_leader_that_leaves_cleanly_hands_over_at_the_standbys_next_step(
    k8s: K8s,
    namespace: str,
    kafka: str,
    topic_factory: TopicFactory,
    operator: Callable[..., Operator],
) -> None:
    topic = topic_factory(partitions=2)
    leader = elected(operator, namespace, "op-a", 1)
    wait_until(lambda: holder(k8s, namespace, 0, 1) == "op-a", 30, "op-a leads", every=0.2)
    apply_ready(k8s, namespace, consumer_group("clean", kafka, topic))
    standby = elected(operator, namespace, "op-b", 1)
    wait_until(lambda: observed_groups(standby) == set(), 30, "the standby's metrics")
    assert leader.proc is not None
    leader.proc.terminate()
    left = time.monotonic()
    wait_until(lambda: holder(k8s, namespace, 0, 1) == "op-b", 30, "op-b leads", every=0.1)
    took = time.monotonic() - left
    assert leader.proc.wait(20) == 0, leader.tail()  # a clean leave exits 0
    scale(k8s, namespace, "clean", 3)
    wait_until(lambda: replicas(k8s, namespace, "clean") == 3, 30, "op-b applies", every=0.2)
    print(f"SIGTERM: op-b leads {took:.1f} s after")
    assert took < leases.DURATION_S, "the leader did not release its Lease: it expired"


def test_two_pods_split_two_shards_and_a_lost_pods_shard_moves_to_the_other(
    k8s: K8s,
    namespace: str,
    kafka: str,
    topic_factory: TopicFactory,
    operator: Callable[..., Operator],
) -> None:
    topic = topic_factory(partitions=2)
    a = elected(operator, namespace, "op-a", 2)
    b = elected(operator, namespace, "op-b", 2)
    wait_until(
        lambda: {holder(k8s, namespace, s, 2) for s in range(2)} == {"op-a", "op-b"},
        40,
        "one shard each",
        every=0.2,
    )
    names = [f"sh{i}" for i in range(6)]
    # The waits below are not measurements (that is `took`): a pass reads every group's lag,
    # which on CI's machine, three test sessions side by side, can take several times longer.
    for name in names:
        apply_ready(k8s, namespace, consumer_group(name, kafka, topic))
    by_pod = {"op-a": a, "op-b": b}
    leads = {s: holder(k8s, namespace, s, 2) for s in range(2)}
    mine = {
        pod: {n for n in names if leads[shards.shard_of(namespace, n, 2)] == pod} for pod in by_pod
    }
    for pod, op in by_pod.items():
        wait_until(partial(exports, op, mine[pod]), 60, f"{pod} observes its groups")
    lost = leads[0]
    process = by_pod[lost].proc
    assert process is not None
    process.kill()
    other = "op-b" if lost == "op-a" else "op-a"
    killed = time.monotonic()
    wait_until(lambda: holder(k8s, namespace, 0, 2) == other, 40, "shard 0 moves", every=0.2)
    took = time.monotonic() - killed
    wait_until(lambda: observed_groups(by_pod[other]) == set(names), 60, "every group observed")
    moved = sorted(mine[lost])
    scale(k8s, namespace, moved[0], 2)
    wait_until(lambda: replicas(k8s, namespace, moved[0]) == 2, 60, "the moved group applied")
    print(f"shards: {lost} killed, shard 0 ({len(moved)} groups) moved in {took:.1f} s")
