"""A share group (KIP-932) through a rolling restart of every broker, then a 20 s SIGKILL of
the broker that coordinates it: the group coordinator moves, and so do the leaders of the
topic's partitions (where the records are acquired and locked) and of the share-group state
topic (where the share coordinator keeps what was acknowledged).

A share group owes no record exactly once: a record acquired from a leader that then stepped
down, or whose acknowledgement the new leader refused, comes back with its next delivery. So
duplicates are counted and printed, not forbidden; what must hold is that every acknowledged
record is handled (nothing lost, nothing archived unprocessed), no record is handled more
often than the group's delivery limit, the group's lag ends at 0 as Kafka's own
``ShareGroupCommand`` reads it, and both workers live through it and stop cleanly.

Judged from the outside, as ``test_broker_roll.py`` judges a consumer group: an acknowledged
producer against the handlers' receipts (``delivery.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.faults.conftest import Fleet, FleetFactory
from tests.faults.delivery import SteadyProducer
from tests.faults.test_broker_roll import PARTITIONS
from tests.infra.kafka import TestbedError
from tests.infra.kafka_cluster import KafkaCluster
from tests.infra.waiting import wait_until

RATE = 150
LOCK_S = 15  # the group's record lock (processing_timeout_s): the broker's usual minimum
DELIVERY_LIMIT = 5
DOWN_S = 20
SHARE_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"
STATE_TOPIC = "__share_group_state"


def share_flags(classpath: str) -> list[str]:
    return [
        "--group-type",
        "share",
        "--share.classpath",
        classpath,
        "--processing-timeout-s",
        str(LOCK_S),
        "--share.delivery-limit",
        str(DELIVERY_LIMIT),
    ]


def describe(cluster: KafkaCluster, group: str, *what: str) -> list[list[str]]:
    """``ShareGroupCommand --describe`` of ``group``: the table's rows, header first ([] when
    the tool prints no table yet, or fails while a broker is away)."""
    try:
        out = cluster.tool(SHARE_GROUP_COMMAND, "--describe", "--group", group, *what)
    except TestbedError as exc:
        print(f"\n{SHARE_GROUP_COMMAND} failed: {str(exc)[-300:]}")
        return []
    rows = [line.split() for line in out.splitlines() if line.strip()]
    return rows if rows and rows[0][0] == "GROUP" else []


def share_lag(cluster: KafkaCluster, group: str) -> dict[int, int | None]:
    """Each partition's lag as ``ShareGroupCommand --offsets`` shows it (None for ``-``)."""
    table = describe(cluster, group, "--offsets")
    if not table:
        return {}
    header, *rows = table
    partition, lag = header.index("PARTITION"), header.index("LAG")
    return {int(row[partition]): None if row[lag] == "-" else int(row[lag]) for row in rows}


def members_assigned(cluster: KafkaCluster, group: str, topic: str) -> int:
    """How many members ``ShareGroupCommand --members`` shows with some of ``topic``."""
    table = describe(cluster, group, "--members")
    return sum(topic in " ".join(row) for row in table[1:])


def wait_joined(workers: Fleet, names: list[str], timeout: float = 180) -> None:
    """Until each worker's share consumers have polled (its state file says ``joined``) and
    the broker shows every one of them assigned some of the topic."""
    wait_until(
        lambda: all(workers.state(n).get("joined") for n in names),
        timeout,
        f"the workers {names} to join {workers.group}",
        every=0.5,
    )
    wait_until(
        lambda: members_assigned(workers.cluster, workers.group, workers.topic) == len(names),
        timeout,
        f"{len(names)} members of {workers.group} assigned {workers.topic}",
        every=1.0,
    )


def how_they_are(workers: Fleet) -> str:
    """Each worker's last word for a failure: alive or its exit code, its share consumers'
    loop and records in hand (a hung member shows here), and its log's last lines."""
    lines = []
    for name, proc in workers.workers.items():
        state = workers.state(name)
        keys = ("joined", "seconds_since_poll", "in_flight", "healthy", "unhealthy_reasons")
        tail = "\n    ".join(workers.log(name).splitlines()[-8:])
        lines.append(
            f"{name}: exit {proc.poll()}, { ({k: state.get(k) for k in keys}) }\n    {tail}"
        )
    return "\n".join(lines)


def state_leaders(cluster: KafkaCluster) -> list[int]:
    """The leader of each partition of the share-group state topic (the share coordinators)."""
    topics = cluster.admin().list_topics(STATE_TOPIC, timeout=10).topics
    found = topics.get(STATE_TOPIC)
    partitions = found.partitions if found is not None else {}
    return [int(partitions[p].leader) for p in sorted(partitions)]


@pytest.mark.timeout(600)  # about 3 minutes; a roll takes twice as long on a busy machine
def test_a_share_group_through_a_rolling_restart_and_a_killed_coordinator_loses_nothing(
    cluster_intact: KafkaCluster,
    cluster_topic: Callable[[int], str],
    fleet: FleetFactory,
    share_classpath: str,
) -> None:
    cluster = cluster_intact
    topic = cluster_topic(PARTITIONS)
    workers = fleet(topic)
    for name in ("a", "b"):
        workers.start(name, *share_flags(share_classpath))
    wait_joined(workers, ["a", "b"])

    with SteadyProducer(cluster.bootstrap, topic, rate=RATE) as producer:
        time.sleep(2)
        steady_start = time.time()
        time.sleep(8)
        coordinator_before = cluster.coordinator(workers.group)
        state_before = state_leaders(cluster)
        roll_start = time.time()
        cluster.roll()
        roll_end = time.time()
        coordinator = cluster.coordinator(workers.group)
        state_after = state_leaders(cluster)
        time.sleep(5)
        killed = time.time()
        cluster.kill(coordinator)
        time.sleep(DOWN_S)
        cluster.revive(coordinator)
        back = time.time()
        cluster.wait_in_sync()
        time.sleep(5)
    produced_end = time.time()
    assert workers.running() == ["a", "b"], f"a worker died:\n{how_they_are(workers)}"

    try:
        wait_until(
            lambda: not workers.delivery(producer).lost, 120, "a receipt of every record", 1.0
        )
        handled_all = time.time()
        wait_until(
            lambda: share_lag(cluster, workers.group) == dict.fromkeys(range(PARTITIONS), 0),
            120,
            f"{workers.group}'s lag to be 0 on all {PARTITIONS} partitions",
            every=2.0,
        )
    except AssertionError as exc:
        lost = workers.delivery(producer).lost
        raise AssertionError(
            f"{exc}; {len(lost)} records without a receipt (first {lost[:5]}); lag "
            f"{share_lag(cluster, workers.group)}\n{how_they_are(workers)}"
        ) from None
    counts = {name: workers.state(name).get("share", {}) for name in ("a", "b")}
    assert workers.stop_all() == {"a": 0, "b": 0}, how_they_are(workers)

    delivery = workers.delivery(producer)
    most = max(delivery.handled.values(), default=0)
    keys = ("acquired", "redelivered", "accepted", "released", "acks_refused", "archived")
    print(
        f"\nroll of {roll_end - roll_start:.0f} s (coordinator {coordinator_before} -> "
        f"{coordinator}, share-state leaders {state_before} -> {state_after}): "
        f"{delivery.summary(roll_start, roll_end)}"
        f"\ncoordinator (node {coordinator}) SIGKILLed, serving again after "
        f"{back - killed:.0f} s: "
        f"{delivery.summary(killed, back + 5)}"
        f"\nsteady {delivery.rate(steady_start, roll_start):.0f}/s; longest handling stall "
        f"{delivery.longest_stall(roll_start, produced_end):.1f} s; every record handled "
        f"{handled_all - produced_end:.0f} s after the last was produced; duplicates "
        f"{delivery.duplicates} ({sum(c > 1 for c in delivery.handled.values())} records, "
        f"at most {most} handlings of one)"
        f"\nworkers: { {n: {k: c.get(k) for k in keys} for n, c in counts.items()} }"
    )
    assert not delivery.lost, f"lost {len(delivery.lost)} records, first {delivery.lost[:5]}"
    assert most <= DELIVERY_LIMIT, f"a record handled {most} times, past the delivery limit"
    assert all(c.get("archived") == 0 for c in counts.values()), f"archived: {counts}"
