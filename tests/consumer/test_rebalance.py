"""Rebalances drain only the revoked partitions, lose nothing and duplicate nothing, while the
partitions a worker keeps go on flowing; for the classic cooperative-sticky protocol and for
KIP-848's consumer protocol."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kafleet import ParallelConsumer, Record
from tests.conftest import ConfigFactory, TopicFactory
from tests.consumer.conftest import Journal
from tests.infra.records import ProduceReport
from tests.infra.waiting import wait_until

Start = Callable[..., ParallelConsumer]
RECORDS = 3_000
PARTITIONS = 6


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_second_worker_joining_mid_stream_loses_and_duplicates_nothing_and_kept_partitions_flow(
    protocol: str,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    consumer_config: ConfigFactory,
    start_consumer: Start,
    journal: Journal,
    group_id: Callable[[], str],
) -> None:
    topic = topic_factory(partitions=PARTITIONS)
    produce(topic, RECORDS, keys=300)
    group = group_id()
    config = consumer_config(
        topic, group=group, group_protocol=protocol, concurrency=PARTITIONS, drain_timeout_s=10.0
    )
    first: ParallelConsumer | None = None

    def slow_while_revoking(record: Record) -> float:
        # A revoked partition's in-flight record takes 1 s more, so the revoke visibly waits
        # for it; records of the partitions the first worker keeps take 30 ms as before.
        assert first is not None
        part = first.snapshot()["partitions"].get(f"{record.topic}[{record.partition}]", {})
        return 1.0 if part.get("revoking") else 0.0

    def usually_30_ms(record: Record) -> float:
        # One record in 50 takes 1 s, so the recent p99 is about that and a revoke may wait
        # up to three times as long (revoke_policy wait) for the slowest in-flight record.
        return 1.0 if record.offset % 50 == 0 else 0.03

    # About 50 ms a record keeps the backlog flowing for about 25 s, well past the rebalance.
    handler = journal.handler("first", delay=usually_30_ms, then=slow_while_revoking)
    first = start_consumer(config, handler)
    wait_until(lambda: journal.count() >= 300, 60, "the first worker to get going")
    second = start_consumer(config, journal.handler("second", delay=lambda r: 0.03))
    wait_until(lambda: len(journal.numbers()) >= RECORDS, 120, f"all {RECORDS:,} records")

    counts = journal.numbers()
    assert sorted(counts) == list(range(RECORDS)), "a record was lost"
    assert [n for n, c in counts.items() if c > 1] == [], "a record was processed twice"

    entries = journal.snapshot()
    first_stats, second_stats = first.snapshot(), second.snapshot()
    revokes = first.stats.revokes
    assert revokes, "the first worker never gave up a partition"
    # KIP-848 may revoke in several steps; look at the revoke that waited longest.
    started, seconds, revoked = max(revokes, key=lambda revoke: revoke[1])
    assert seconds >= 0.8, f"no revoke waited for in-flight work: {list(revokes)}"
    kept = set(first.poller.assignment)
    assert kept, "the first worker kept no partition"
    assert {e.partition for e in entries if e.worker == "second"}
    flowing = [
        e
        for e in entries
        if e.worker == "first"
        and (topic, e.partition) in kept
        and started <= e.ended <= started + seconds
    ]
    assert len(flowing) >= 5, f"kept partitions stalled while {revoked} drained for {seconds:.2f} s"
    assert first_stats["partitions_lost_total"] == 0
    assert second_stats["partitions_lost_total"] == 0
    assert not set(revoked) & kept


def test_a_stopped_worker_hands_its_partitions_over_with_their_offsets_committed(
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    consumer_config: ConfigFactory,
    start_consumer: Start,
    journal: Journal,
    committed_offsets: Callable[[str, str, int], dict[int, int]],
    end_offsets: Callable[[str, int], dict[int, int]],
) -> None:
    topic = topic_factory(partitions=3)
    produce(topic, 600)
    config = consumer_config(topic, concurrency=3)
    first = start_consumer(config, journal.handler("first", delay=lambda r: 0.005))
    second = start_consumer(config, journal.handler("second", delay=lambda r: 0.005))
    wait_until(lambda: journal.count() >= 150, 60, "both workers to get going")

    first.close(grace_s=10)
    wait_until(lambda: len(journal.numbers()) >= 600, 60, "all 600 records")
    second.close(grace_s=10)

    assert [n for n, c in journal.numbers().items() if c > 1] == []
    assert committed_offsets(config.group_id, topic, 3) == end_offsets(topic, 3)
