"""No partition starves behind a hot one: with a deep backlog on one partition and a little
on the others, the cold partitions' records are handled within the first polls, not after the
hot backlog (KIP-41's fair take, on the real broker)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from kafleet import ParallelConsumer, Record
from tests.conftest import ConfigFactory, TopicFactory
from tests.infra.records import ProduceReport
from tests.infra.waiting import wait_until

HOT, COLD = 20_000, 100


def test_cold_partitions_are_served_while_a_hot_partitions_backlog_waits(
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    consumer_config: ConfigFactory,
    start_consumer: Callable[..., ParallelConsumer],
) -> None:
    topic = topic_factory(partitions=4)
    produce(topic, HOT, partition=0)  # the hot partition's backlog is written first
    for partition in (1, 2, 3):
        produce(topic, COLD, partition=partition, start=HOT + partition * COLD)
    lock = threading.Lock()
    hot_done = 0
    cold_done: list[int] = []  # how many hot records were done when each cold one was

    def handle(record: Record) -> None:
        nonlocal hot_done
        time.sleep(0.0005)
        with lock:
            if record.partition == 0:
                hot_done += 1
            else:
                cold_done.append(hot_done)

    config = consumer_config(topic, ordering="unordered", concurrency=4, max_poll_records=20)
    start_consumer(config, handle)
    wait_until(lambda: len(cold_done) == 3 * COLD, 60, "every cold record")

    assert max(cold_done) < HOT // 4, (
        f"the last cold record waited for {max(cold_done):,} of the hot partition's records"
    )
