"""What the Poller does with a poll's records before any handler sees them: at most once, no
record enters the queues before a commit covering it is acknowledged; an offset that goes back
restarts the partition's tracking instead of killing the worker.

Pure logic against a fake ``confluent_kafka.Consumer`` (commits fail on demand, offsets jump);
the rebalance and commit behaviour of the real client is covered against the broker elsewhere.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from kafleet import load_config
from kafleet.engine.offsets import OffsetTracker
from kafleet.engine.poller import Poller
from kafleet.engine.work_queue import WorkQueues
from kafleet.health.state import Stats

TP0 = ("t", 0)


def FakeMessage(partition: int, offset: int) -> Message:  # noqa: N802 - stands for a class
    return Message(topic="t", partition=partition, offset=offset, key=b"k", value=b"v")


class FakeConsumer:
    """Hands out the offsets it is given; synchronous commits fail ``failing_commits`` times."""

    def __init__(self) -> None:
        self.deliveries: list[list[Message]] = []
        self.failing_commits = 0
        self.commits: list[dict[tuple[str, int], int]] = []
        self.async_commits: list[dict[tuple[str, int], int]] = []
        self.paused: set[tuple[str, int]] = set()

    def deliver(self, partition: int, offsets: range) -> None:
        """Queue records in the client's queue; consume() returns them in that order, no
        more than it is asked for, and at most what was delivered before it."""
        self.deliveries.append([FakeMessage(partition, o) for o in offsets])

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        batch: list[Message] = []
        while self.deliveries and len(batch) < num_messages:
            head = self.deliveries[0]
            count = num_messages - len(batch)
            batch += head[:count]
            del head[:count]
            if not head:
                self.deliveries.pop(0)
        return batch

    def commit(self, offsets: list[TopicPartition], asynchronous: bool = True) -> Any:
        if asynchronous:  # its outcome would come through on_commit
            self.async_commits.append({(tp.topic, tp.partition): tp.offset for tp in offsets})
            return None
        if self.failing_commits:
            self.failing_commits -= 1
            raise KafkaException(KafkaError(KafkaError.ILLEGAL_GENERATION))
        self.commits.append({(tp.topic, tp.partition): tp.offset for tp in offsets})
        return offsets

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.paused |= {(tp.topic, tp.partition) for tp in partitions}

    def resume(self, partitions: list[TopicPartition]) -> None:
        self.paused -= {(tp.topic, tp.partition) for tp in partitions}


def poller(
    guarantee: str,
    consumer: FakeConsumer,
    max_poll_records: int = 500,
    commit_interval_ms: int = 600_000,  # by default no periodic commit: only those under test
    queue: dict[str, float] | None = None,
) -> tuple[Poller, WorkQueues, Stats]:
    config = load_config(
        None,
        {
            "bootstrap_servers": "fake:9092",
            "group_id": "g",
            "topics": ["t"],
            "guarantee": guarantee,
            "max_poll_records": max_poll_records,
            "poll_interval_ms": 1,
            "commit_interval_ms": commit_interval_ms,
            "drain_timeout_s": 0.1,  # a revoke waits for started records that never end
            "queue": queue or {},
        },
    )
    queues, stats = WorkQueues(config.queue, config.ordering, 4), Stats()
    p = Poller(config, queues, OffsetTracker(), stats, consumer_factory=lambda _: consumer)  # type: ignore[arg-type,return-value]
    p._consumer = p.committer.consumer = consumer  # type: ignore[assignment]
    p.rebalance.on_assign(consumer, [TopicPartition("t", n) for n in range(4)])  # type: ignore[arg-type]
    return p, queues, stats


def queued(queues: WorkQueues, tp: tuple[str, int] = TP0) -> int:
    return int(queues.snapshot()[tp]["queued"])  # type: ignore[call-overload]


def test_at_most_once_hands_no_record_over_until_a_commit_covering_it_is_acknowledged() -> None:
    consumer = FakeConsumer()
    p, queues, _ = poller("at-most-once", consumer)
    consumer.deliver(0, range(10))
    consumer.failing_commits = 2

    p._poll_once()
    assert queued(queues) == 0, "records were queued although their commit failed"
    assert TP0 in consumer.paused, "intake was not held while the commit failed"
    p._poll_once()  # the retry fails too
    assert queued(queues) == 0
    p._poll_once()  # the retry succeeds

    assert consumer.commits[-1] == {TP0: 10}
    assert queued(queues) == 10
    assert TP0 not in consumer.paused


def start(queues: WorkQueues, count: int) -> None:
    """Handlers take ``count`` records of partition 0 (they are started, not finished)."""
    run = queues.take(timeout=0, max_run=count)
    assert run is not None
    assert len(run) == count


def test_at_most_once_records_waiting_for_their_commit_are_left_to_the_next_owner() -> None:
    consumer = FakeConsumer()
    p, queues, _ = poller("at-most-once", consumer)
    consumer.deliver(0, range(5))
    p._poll_once()  # 0-4 committed and queued
    start(queues, 5)
    consumer.deliver(0, range(5, 10))
    consumer.failing_commits = 1
    p._poll_once()  # 5-9 wait for their commit

    p.rebalance.on_revoke(consumer, [TopicPartition("t", 0)])  # type: ignore[arg-type]

    assert consumer.commits[-1] == {TP0: 5}, "the revoke committed records that never ran"


@pytest.mark.parametrize("guarantee", ["at-least-once", "at-most-once"])
def test_an_offset_that_goes_back_restarts_the_partitions_tracking(guarantee: str) -> None:
    consumer = FakeConsumer()
    p, queues, stats = poller(guarantee, consumer)
    consumer.deliver(0, range(100, 110))
    p._poll_once()
    consumer.deliver(0, range(40, 45))  # a log truncation or an offset reset

    p._poll_once()

    assert stats.offset_rewinds == 1
    assert queued(queues) == 5, "the old run's queued records were not dropped"
    first = queues.take(timeout=0)
    assert first is not None
    assert [m.offset() for m in first.messages] == [40]
    # What may be committed starts again at 40 (at most once, the records are done on intake).
    assert p.offsets.handled(TP0) == (40 if guarantee == "at-least-once" else 45)


def test_a_poll_takes_its_records_fairly_from_a_hot_partition_and_cold_ones() -> None:
    consumer = FakeConsumer()
    p, queues, _ = poller("at-least-once", consumer, max_poll_records=20)
    consumer.deliver(0, range(1_000))  # the hot partition's batch is ahead in the client
    for partition in (1, 2, 3):
        consumer.deliver(partition, range(50))

    p._poll_once()

    assert [queued(queues, ("t", n)) for n in range(4)] == [5, 5, 5, 5]


def test_at_most_once_a_revoke_gives_the_queued_records_that_never_started_back() -> None:
    consumer = FakeConsumer()
    p, queues, _ = poller("at-most-once", consumer)
    consumer.deliver(0, range(100))
    p._poll_once()  # 0-99 committed and queued
    start(queues, 10)  # 0-9 started

    p.rebalance.on_revoke(consumer, [TopicPartition("t", 0)])  # type: ignore[arg-type]

    assert consumer.commits[-1] == {TP0: 10}, "records that never ran were lost"


def test_at_most_once_a_revoke_that_drops_every_waiting_record_ends_the_hold() -> None:
    consumer = FakeConsumer()
    p, _, _ = poller("at-most-once", consumer)
    consumer.deliver(0, range(10))
    consumer.failing_commits = 1
    p._poll_once()  # 0-9 wait for their commit; every partition is paused at the client
    assert consumer.paused == {("t", n) for n in range(4)}

    p.rebalance.on_revoke(consumer, [TopicPartition("t", 0)])  # type: ignore[arg-type]
    for _ in range(3):
        p._poll_once()

    assert not p.holding
    assert consumer.paused & {("t", n) for n in (1, 2, 3)} == set(), "kept partitions stay paused"


def test_at_most_once_sends_no_periodic_commit_over_records_that_wait_for_theirs() -> None:
    consumer = FakeConsumer()
    p, _, _ = poller("at-most-once", consumer, commit_interval_ms=10)
    consumer.deliver(0, range(10))
    consumer.failing_commits = 100
    p._poll_once()
    sent = len(consumer.async_commits)
    for _ in range(5):
        time.sleep(0.02)
        p._poll_once()

    assert len(consumer.async_commits) == sent


def test_a_paused_partition_whose_offsets_go_back_is_resumed_at_the_client() -> None:
    consumer = FakeConsumer()
    bounds = {"max_records": 20, "resume_at": 0.1}  # paused at 10 queued, resumed at 1
    p, queues, _ = poller("at-least-once", consumer, max_poll_records=10, queue=bounds)
    consumer.deliver(0, range(20))
    p._poll_once()
    p._poll_once()  # 20 queued: partition 0 is paused, at the client too
    assert TP0 in consumer.paused
    run = queues.take(timeout=0, max_run=15)  # 15 handled: 5 still queued
    assert run is not None
    queues.finish(run)
    queues.release()
    consumer.deliver(0, range(10))  # after a truncation: the offsets went back

    p._poll_once()

    assert p.stats.offset_rewinds == 1
    assert not queues.is_paused(TP0)
    assert TP0 not in consumer.paused, "the client kept the pause of a partition started afresh"


class SeekingConsumer(FakeConsumer):
    """Knows each partition's position (42, or none for partition 3) and records seeks."""

    def __init__(self) -> None:
        super().__init__()
        self.seeks: list[tuple[str, int, int]] = []

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [
            TopicPartition(tp.topic, tp.partition, -1001 if tp.partition == 3 else 42)
            for tp in partitions
        ]

    def seek(self, tp: TopicPartition) -> None:
        self.seeks.append((tp.topic, tp.partition, tp.offset))


@pytest.mark.parametrize(
    ("others_fetching", "seeks"),
    [(True, []), (False, [("t", 0, 42)])],
)
def test_a_resumed_partition_is_sought_to_its_position_only_when_nothing_else_fetches(
    others_fetching: bool, seeks: list[tuple[str, int, int]]
) -> None:
    """librdkafka's broker thread picks a resumed partition up at its next wake-up, up to a
    second later when nothing else fetches; a seek to where it resumes starts it at once."""
    consumer = SeekingConsumer()
    p, queues, stats = poller("at-least-once", consumer)
    queues.is_paused = lambda tp: tp != TP0 and not others_fetching  # type: ignore[method-assign]
    consumer.paused = {("t", n) for n in range(4)}

    p._resume([TP0])

    assert TP0 not in consumer.paused
    assert consumer.seeks == seeks
    assert stats.resumes == 1


def test_a_resumed_partition_with_no_position_yet_is_not_sought() -> None:
    consumer = SeekingConsumer()
    p, queues, _ = poller("at-least-once", consumer)
    queues.is_paused = lambda tp: tp not in {("t", 3)}  # type: ignore[method-assign]

    p._resume([("t", 3)])

    assert consumer.seeks == []
