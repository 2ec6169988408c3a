"""The operator's reading of a group's lag on three brokers while they die and come back, read
as the operator reads it (a reading process per cluster, ``readers.Reader``, and ``lag_of``):
while the leader of some partitions is dead the lag is unknown, naming one of them, never a
smaller figure, and an autoscaling pass on it holds the replicas and says why; the exact lag
is read again within a pass of the leadership moving away, of the broker coming back and of
the leadership moving back to it; a reading process that dies in a read is replaced at once,
and the figure is never a smaller one. The same policies without a cluster:
``test_log_offsets.py``, ``test_unknown_lag_holds_the_fleet.py``.

Each test kills one broker (SIGKILL, no controlled shutdown); its leaderships move once the
controller fences it (``broker.session.timeout.ms``, 9 s)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from kafleet.config.security import Security
from kafleet_operator.reading import clusters, lag_reader, readers, snapshots
from tests.infra.kafka import TestbedError
from tests.infra.kafka_cluster import KafkaCluster
from tests.operator.conftest import LaggingGroup, Passes

# The operator's pass (``kafleet operator --interval-s``, 5 s by default): the lag must be
# exact again at the first pass after a move.
PASS_S = 5.0
READ_EVERY_S = 1.0  # how often these tests read: five times a pass
MOVE_S = 40.0  # a dead broker's leaderships move within this (fenced after 9 s)


@dataclass
class Reading:
    """One read as a pass gets it: the group's lag, or why it is unknown."""

    started: float
    ended: float
    total: int | None
    unknown: Exception | None
    snapshot: snapshots.Snapshot | None

    @property
    def partition(self) -> str | None:
        """The partition the unknown lag names, if it names one."""
        return (
            self.unknown.partition
            if isinstance(self.unknown, lag_reader.LagUnreadableError)
            else None
        )


def timeline(readings: list[Reading], since: float) -> str:
    """One line a reading: when it started and ended, and the lag or why it is unknown."""
    lines = []
    for r in readings:
        if isinstance(r.unknown, KafkaException):
            said = lag_reader.describe(r.unknown)
        else:
            said = str(r.total if r.unknown is None else r.unknown)
        lines.append(f"{r.started - since:6.1f} s to {r.ended - since:6.1f} s: {said}")
    return "\n".join(lines)


def read(reader: readers.Reader, want: snapshots.Want) -> Reading:
    started = time.monotonic()
    found = reader.read([want])
    ended = time.monotonic()
    if isinstance(found, KafkaException):
        return Reading(started, ended, None, found, None)
    try:
        total = lag_reader.lag_of(found, want).total
    except (lag_reader.LagUnreadableError, KafkaException) as exc:
        return Reading(started, ended, None, exc, found)
    return Reading(started, ended, total, None, found)


def reads_until(
    reader: readers.Reader,
    want: snapshots.Want,
    done: Callable[[Reading], bool],
    within_s: float,
) -> list[Reading]:
    """Reads every ``READ_EVERY_S`` until ``done(the last reading)``."""
    readings: list[Reading] = []
    deadline = time.monotonic() + within_s
    while True:
        readings.append(read(reader, want))
        if done(readings[-1]):
            return readings
        assert time.monotonic() < deadline, f"not done within {within_s:.0f} s"
        time.sleep(max(0.0, readings[-1].started + READ_EVERY_S - time.monotonic()))


class Watch:
    """The cluster as a client of its own sees it: who leads the group's partitions, and who
    coordinates the group (a metadata request each time, nothing cached). Only metadata while
    a broker is down: this process must not meet librdkafka's coordinator aborts."""

    def __init__(self, cluster: KafkaCluster, group: LaggingGroup) -> None:
        self.admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        self.group = group

    def leaders(self, topic: str | None = None) -> dict[int, int]:
        topic = topic or self.group.topic
        found = self.admin.list_topics(topic, timeout=10).topics[topic]
        return {p: meta.leader for p, meta in found.partitions.items()}

    def coordinator(self) -> int:
        """The leader of the group's partition of the offsets topic (Kafka's own choice:
        ``Utils.abs(groupId.hashCode()) % partitions``)."""
        offsets = self.leaders("__consumer_offsets")
        return offsets[_java_abs(_java_hash(self.group.group)) % len(offsets)]

    def described_coordinator(self) -> int:
        """The coordinator the group's description names (asked only while every node is up)."""
        described = self.admin.describe_consumer_groups([self.group.group])[self.group.group]
        return int(described.result(10).coordinator.id)

    def led_by(self, node: int) -> list[str]:
        return [
            f"{self.group.topic}[{p}]" for p, leader in self.leaders().items() if leader == node
        ]


def _java_hash(text: str) -> int:
    """``String.hashCode()``: over UTF-16 code units, in 32-bit arithmetic."""
    units = text.encode("utf-16-be")
    value = 0
    for i in range(0, len(units), 2):
        value = (31 * value + int.from_bytes(units[i : i + 2], "big")) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def _java_abs(value: int) -> int:
    return 0 if value == -(1 << 31) else abs(value)


def elect_preferred_leaders(
    cluster: KafkaCluster, watch: Watch, node: int, partitions: list[str]
) -> None:
    """``partitions``' leadership back to ``node``, their preferred replica, asked again until
    ``node`` is back in their in-sync replicas and leads them."""
    deadline = time.monotonic() + MOVE_S
    while sorted(watch.led_by(node)) != sorted(partitions):
        assert time.monotonic() < deadline, f"broker {node} does not lead {partitions} again"
        with contextlib.suppress(TestbedError):  # not yet in sync: "not available"
            cluster.elect_preferred_leaders(watch.group.topic, len(watch.leaders()))
        time.sleep(0.5)


def test_a_dead_leaders_partitions_are_unknown_then_exact_within_a_pass_of_each_move(
    cluster_intact: KafkaCluster,
    lagging_group: Callable[[int], LaggingGroup],
) -> None:
    """The issue: the broker leading 2 of 6 partitions SIGKILLed; for 20 s the lag read 677
    of 1,000 (``Observed``) and the fleet scaled on it; after the broker came back, 20 s more
    of "Leader epoch is older than broker epoch"."""
    group = lagging_group(6)
    watch = Watch(cluster_intact, group)
    coordinator = watch.coordinator()
    victim = next(n for n in sorted(set(watch.leaders().values())) if n != coordinator)
    dead_led = watch.led_by(victim)
    reader = readers.Reader(snapshots.Target(cluster_intact.bootstrap, Security(), group.want))
    try:
        before = read(reader, group.want)
        cluster_intact.kill(victim)
        killed = time.monotonic()
        while_dead = reads_until(reader, group.want, lambda _: not watch.led_by(victim), MOVE_S)
        moved = time.monotonic()
        after_move = read(reader, group.want)
        cluster_intact.revive(victim)
        after_return = read(reader, group.want)
        elect_preferred_leaders(cluster_intact, watch, victim, dead_led)
        after_move_back = read(reader, group.want)
    finally:
        reader.close()

    every = [before, *while_dead, after_move, after_return, after_move_back]
    print(f"killed broker {victim} (leading {dead_led}) at 0 s, moved at {moved - killed:.1f} s")
    print(timeline(every, killed))
    assert before.total == group.lag == 1050
    assert all(r.total in (None, group.lag) for r in every)  # unknown, never a smaller lag
    assert while_dead[0].partition in dead_led  # the first pass after the kill
    assert all(r.partition in (None, *dead_led) for r in while_dead)
    assert after_move.total == group.lag  # the first pass after the move
    assert after_move.ended - moved < PASS_S
    assert after_return.total == group.lag  # not "Leader epoch is older than broker epoch"
    assert after_move_back.total == group.lag  # nor after the leadership moved back


def test_an_autoscaling_pass_on_a_dead_leaders_reading_holds_the_replicas_and_says_why(
    cluster_intact: KafkaCluster,
    lagging_group: Callable[[int], LaggingGroup],
    lag_passes: Callable[..., Passes],
) -> None:
    """The issue's pass: ``replicas 5 -> 6: lag 677 over 6 partitions``, ``Degraded False
    Observed``, on a lag that was 1,000."""
    group = lagging_group(6)
    watch = Watch(cluster_intact, group)
    coordinator = watch.coordinator()
    victim = next(n for n in sorted(set(watch.leaders().values())) if n != coordinator)
    dead_led = watch.led_by(victim)
    passes = lag_passes(group.want, 5, {"lag_per_replica": 100, "max_replicas": 10})
    reader = readers.Reader(snapshots.Target(cluster_intact.bootstrap, Security(), group.want))
    try:
        whole = read(reader, group.want)
        cluster_intact.kill(victim)
        dead = read(reader, group.want)
    finally:
        reader.close()

    assert whole.snapshot is not None
    assert dead.snapshot is not None
    _, healthy = passes.observe(whole.snapshot)
    degraded, patch = passes.observe(dead.snapshot)

    assert dead.partition in dead_led
    assert [d.replicas for d in passes.decisions] == [6, 5]  # 6 wished on the whole lag ...
    assert passes.decisions[1].reason == "LagUnknown"  # ... and no move on the unknown one
    assert healthy.status["lag"] == group.lag
    assert "lag" not in patch.status
    assert (degraded["status"], degraded["reason"]) == ("True", "LagUnreadable")
    assert f"the offsets of {dead.partition} cannot be read" in degraded["message"]
    assert f"its leader (broker {victim}) did not answer" in degraded["message"]


def test_a_reading_process_killed_in_a_read_is_replaced_at_once_and_never_reads_less(
    cluster_intact: KafkaCluster, lagging_group: Callable[[int], LaggingGroup]
) -> None:
    """librdkafka aborts in its admin client when a coordinator moves (#5040, #3663; seen
    here: ``rd_kafka_enq_once_del_source_return: Assertion 'eonce->refcnt > 0' failed``). The
    group's coordinator is killed, and the reading process aborted in the read that follows:
    the read is asked again of a new process at once, and says unknown or the exact lag."""
    group = lagging_group(6)
    watch = Watch(cluster_intact, group)
    coordinator = watch.coordinator()
    assert coordinator == watch.described_coordinator()
    reader = readers.Reader(snapshots.Target(cluster_intact.bootstrap, Security(), group.want))
    try:
        before = read(reader, group.want)
        first = reader.process
        cluster_intact.kill(coordinator)
        killed = time.monotonic()
        answered: list[Reading] = []
        reading = threading.Thread(target=lambda: answered.append(read(reader, group.want)))
        reading.start()
        time.sleep(1.0)  # in the read: a dead coordinator holds it for seconds
        aborted = time.monotonic()
        with contextlib.suppress(ProcessLookupError):  # librdkafka may have been first
            os.kill(first.pid, signal.SIGABRT)
        reading.join(readers.ANSWER_S * 2)
        assert answered, "the read did not return"
        second = reader.process
        later = reads_until(
            reader, group.want, lambda _: watch.coordinator() != coordinator, MOVE_S
        )
        moved = time.monotonic()
        settled = reads_until(reader, group.want, lambda r: r.total is not None, PASS_S * 2)
    finally:
        reader.close()

    (killed_read,) = answered
    every = [before, killed_read, *later, *settled]
    print(f"killed broker {coordinator} (the coordinator) at 0 s, moved at {moved - killed:.1f} s")
    print(timeline(every, killed))
    assert before.total == group.lag
    assert all(r.total in (None, group.lag) for r in every)  # unknown, never a smaller lag
    assert second is not first  # replaced within the read (None: the new one died too)
    # Asked again of a new process at once: within a read's own deadline of the abort.
    assert killed_read.ended - aborted < clusters.TIMEOUT_S + PASS_S
    assert settled[-1].total == group.lag
