"""KIP-1206's strict record limit: with ``share.acquire_mode: record_limit`` no poll acquires
more than ``max_poll_records`` records, however large the batches the records were written in;
``batch_optimized`` hands out more; and a live change of ``max_poll_records`` bounds the polls
that follow, with nothing lost or doubled on the way."""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Callable

from kafleet.config.share import admin_properties, java_properties
from kafleet.share import jvm
from kafleet.share.client import Ack, ShareAdmin, ShareClient
from tests.conftest import ConfigFactory, TopicFactory
from tests.infra.records import ProduceReport, record_number
from tests.infra.waiting import wait_until
from tests.share.conftest import Journal, StartShare

RECORDS = 5000
# One producer request carries thousands of records: one record batch of the log holds many.
LARGE_BATCHES = {"linger.ms": 2000, "batch.num.messages": 10_000, "batch.size": 4_000_000}


def _produce_in_large_batches(produce: Callable[..., ProduceReport], topic: str) -> None:
    produce(topic, RECORDS, value_size=20, config=LARGE_BATCHES)


def test_no_poll_acquires_more_than_max_poll_records_with_record_limit(
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    share_config: ConfigFactory,
    start_share: StartShare,
    journal: Journal,
) -> None:
    topic = topic_factory(partitions=1)
    _produce_in_large_batches(produce, topic)
    config = share_config(
        topic,
        max_poll_records=3,
        concurrency=6,
        share={"acquire_mode": "record_limit", "consumers": 2},
    )

    consumer, polls = start_share(config, journal.handler())
    wait_until(lambda: journal.count() >= RECORDS, 240, f"all {RECORDS} records handled")

    sizes = Counter(poll.size for poll in polls.snapshot())
    assert max(sizes) == 3, sizes
    assert consumer.counts.largest_poll == 3
    assert journal.numbers() == Counter(range(RECORDS))
    wait_until(lambda: consumer.counts.accepted == RECORDS, 30, "every record accepted")
    assert consumer.counts.acquired == RECORDS
    assert consumer.counts.redelivered == 0


def test_a_share_client_of_its_own_never_gets_more_than_its_limit_in_one_poll(
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    share_config: ConfigFactory,
) -> None:
    topic = topic_factory(partitions=1)
    _produce_in_large_batches(produce, topic)
    config = share_config(topic, share={"acquire_mode": "record_limit"})
    jvm.start(config.share.classpath, config.share.jvm_options)
    admin = ShareAdmin(admin_properties(config))
    try:  # a new share group starts at the end of the log unless told otherwise
        admin.set_group_configs(config.group_id, {"share.auto.offset.reset": "earliest"}, 30)
    finally:
        admin.close()
    client = ShareClient(java_properties(config, 3), [topic])
    seen: Counter[int] = Counter()
    sizes: Counter[int] = Counter()
    try:
        deadline = time.monotonic() + 240
        while len(seen) < RECORDS and time.monotonic() < deadline:
            records = client.poll(0.5)
            sizes[len(records)] += 1
            for record in records:
                seen[record_number(record.record.value or b"")] += 1
                client.acknowledge(record, Ack.ACCEPT)
        client.commit(10.0)
    finally:
        client.close()

    assert seen == Counter(range(RECORDS))
    assert max(sizes) == 3, sizes


def test_batch_optimized_hands_out_more_than_max_poll_records_in_one_poll(
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    share_config: ConfigFactory,
    start_share: StartShare,
    journal: Journal,
) -> None:
    topic = topic_factory(partitions=1)
    _produce_in_large_batches(produce, topic)
    config = share_config(  # a lock long enough for a poll of every record
        topic,
        max_poll_records=3,
        concurrency=6,
        processing_timeout_s=60,
        share={"acquire_mode": "batch_optimized"},
    )

    consumer, polls = start_share(config, journal.handler())
    wait_until(lambda: journal.count() >= RECORDS, 240, f"all {RECORDS} records handled")

    largest = max(poll.size for poll in polls.snapshot())
    print(f"batch_optimized with max_poll_records 3: the largest poll held {largest} records")
    assert largest > 3
    assert consumer.counts.largest_poll == largest
    assert journal.numbers() == Counter(range(RECORDS))


def test_a_live_change_of_max_poll_records_bounds_the_polls_after_it_and_loses_nothing(
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    share_config: ConfigFactory,
    start_share: StartShare,
    journal: Journal,
) -> None:
    topic = topic_factory(partitions=1)
    total = 3000
    produce(topic, total, value_size=20, config=LARGE_BATCHES)
    config = share_config(topic, max_poll_records=3, concurrency=40)

    consumer, polls = start_share(config, journal.handler(delay=0.002))
    wait_until(lambda: journal.count() >= 300, 120, "300 records handled at 3 a poll")
    consumer.tune(max_poll_records=40)
    wait_until(
        lambda: any(p.size > 3 for p in polls.snapshot()), 60, "a poll of more than 3 records"
    )
    wait_until(lambda: journal.count() >= 1500, 120, "1500 records handled")
    consumer.tune(max_poll_records=2)
    wait_until(lambda: any(p.limit == 2 for p in polls.snapshot()), 60, "a poll at the limit 2")
    wait_until(lambda: journal.count() >= total, 240, f"all {total} records handled")

    logged = polls.snapshot()
    assert all(p.size <= p.limit for p in logged), [p for p in logged if p.size > p.limit]
    assert [limit for limit, _ in itertools.groupby(p.limit for p in logged)] == [3, 40, 2]
    assert max(p.size for p in logged if p.limit == 40) > 3
    assert max(p.size for p in logged if p.limit == 2) == 2
    assert journal.numbers() == Counter(range(total))
    wait_until(lambda: consumer.counts.accepted == total, 30, "every record accepted")
    assert consumer.max_poll_records == 2
