"""One operator holds many groups (a real operator process, a real apiserver with kwok, the real
broker): 200 ConsumerGroups are read through one Kafka client, write no status at rest, and a
lag step on one of them scales it within two passes; the groups of a second cluster that cannot
be reached say so, and only they."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from kafleet_operator.policy.tuning import APPLY_TIMEOUT_S
from kafleet_operator.reading.clusters import TIMEOUT_S
from tests.conftest import K8s
from tests.infra.ports import free_port
from tests.infra.records import ProduceReport
from tests.infra.waiting import wait_until
from tests.operator.conftest import Operator, condition, consumer_group
from tests.operator.test_scaling_and_tuning import replicas

GROUPS = 200
UNREACHABLE = 3
INTERVAL_S = 1.0  # the test operator's --interval-s


@pytest.fixture
def topics(admin: AdminClient, request: pytest.FixtureRequest) -> Iterator[list[str]]:
    """A topic of 2 partitions per group, made in one request, deleted after."""
    names = [f"scale-{n:03d}-{time.monotonic_ns() % 10**8}" for n in range(GROUPS)]
    for future in admin.create_topics([NewTopic(t, 2, 1) for t in names]).values():
        future.result(60)
    yield names
    for future in admin.delete_topics(names).values():
        future.exception(60)


def apiserver_writes(k8s: K8s) -> dict[str, float]:
    """The apiserver's count of PATCH requests on ConsumerGroups, by subresource."""
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(k8s.kubectl("get", "--raw", "/metrics")):
        for sample in family.samples:
            labels = sample.labels
            if (
                sample.name == "apiserver_request_total"
                and labels.get("resource") == "consumergroups"
                and labels.get("verb") == "PATCH"
            ):
                key = labels.get("subresource") or "object"
                found[key] = found.get(key, 0.0) + sample.value
    return found


def groups(k8s: K8s, namespace: str) -> dict[str, dict[str, Any]]:
    listed = yaml.safe_load(k8s.kubectl("get", "kcg", "-n", namespace, "-o", "yaml"))
    return {g["metadata"]["name"]: g for g in listed["items"]}


def readers(pid: int) -> list[int]:
    """The operator's child processes that read Kafka (not multiprocessing's own tracker)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
            if b"spawn_main" in cmdline:
                found.append(int(child))
    return found


@pytest.mark.timeout(900)  # a busy machine: settling and resting may take minutes
def test_two_hundred_groups_share_one_kafka_client_write_nothing_at_rest_and_scale_on_time(
    k8s: K8s,
    namespace: str,
    kafka: str,
    topics: list[str],
    produce: Callable[..., ProduceReport],
    operator: Callable[..., Operator],
) -> None:
    nowhere = f"127.0.0.1:{free_port()}"  # a second cluster, down
    policy = {"min_replicas": 1, "max_replicas": 2, "lag_per_replica": 100}
    tuned = {"enabled": True}  # on half of them: their pods have no sidecar to answer
    manifests = [
        consumer_group(f"g{n:03d}", kafka, topic, autoscaling=policy, tuning=tuned)
        if n % 2
        else consumer_group(f"g{n:03d}", kafka, topic, autoscaling=policy)
        for n, topic in enumerate(topics)
    ] + [
        consumer_group(f"down{n}", nowhere, topics[0], autoscaling=policy)
        for n in range(UNREACHABLE)
    ]
    running = operator()
    listing = {"apiVersion": "v1", "kind": "List", "items": manifests}
    k8s.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(listing))

    def settled() -> bool:
        found = groups(k8s, namespace)
        ready = [n for n, g in found.items() if condition(g, "Ready").get("status") == "True"]
        down = [n for n in found if n.startswith("down")]
        judged = all(condition(found[n], "Degraded").get("reason") for n in down)
        return len(found) == GROUPS + UNREACHABLE and len(ready) >= GROUPS and judged

    # The unreachable cluster's groups are judged after their connection attempts time out,
    # which on a busy machine may come after the others are Ready.
    wait_until(settled, 240, f"{GROUPS} groups Ready and the unreachable ones judged", every=2)

    found = groups(k8s, namespace)
    for n in range(UNREACHABLE):
        degraded = condition(found[f"down{n}"], "Degraded")
        assert degraded.get("reason") == "KafkaUnreachable", degraded
    for name in (f"g{n:03d}" for n in range(GROUPS)):
        degraded = condition(found[name], "Degraded")
        assert degraded.get("status") == "False", (name, degraded)
    assert running.proc is not None
    assert running.metric("kafleet_operator_kafka_clusters") == 2  # the broker, and nowhere
    assert len(readers(running.proc.pid)) == 2  # one reading process per cluster

    def quiet() -> bool:  # at rest: no status written while every cluster was read again,
        # and no tuning step still on its way (its status changes once its pods report it, or
        # once tuning.APPLY_TIMEOUT_S has passed: later than the window below on a busy machine)
        first = running.metric("kafleet_operator_status_writes_total")
        time.sleep(TIMEOUT_S + 2 * INTERVAL_S)  # the cluster that is down answers this late
        pending = [
            n for n, g in groups(k8s, namespace).items()
            if (g.get("status", {}).get("tuning") or {}).get("pending")
        ]  # fmt: skip
        return not pending and running.metric("kafleet_operator_status_writes_total") == first

    wait_until(quiet, 180 + APPLY_TIMEOUT_S, "the fleet at rest", every=0.1)
    before, statuses = apiserver_writes(k8s), groups(k8s, namespace)
    time.sleep(10 * INTERVAL_S)
    after, changed = apiserver_writes(k8s), groups(k8s, namespace)
    moved = {
        name: {k: (g["status"].get(k), v) for k, v in changed[name]["status"].items()
               if g["status"].get(k) != v}
        for name, g in statuses.items()
        if g.get("status") != changed[name].get("status")
    }  # fmt: skip
    assert after == before, f"PATCHes at rest: {before} -> {after}: {list(moved.items())[:3]}"

    step = time.monotonic()
    produce(topics[17], 400)
    wait_until(lambda: replicas(k8s, namespace, "g017") == 2, 30, "g017 scaled", every=0.2)
    took = time.monotonic() - step
    print(f"\nstep -> g017's Deployment at 2 replicas: {took:.1f} s")
    assert took <= 10.0  # two passes at the default interval of 5 s
    assert replicas(k8s, namespace, "g018") == 1
