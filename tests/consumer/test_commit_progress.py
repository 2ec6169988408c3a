"""Records are committed as they finish, not when the run of records they were taken in ends:
a slow record never holds back the commit of the fast ones handled before it."""

from __future__ import annotations

import threading
from collections.abc import Callable

from kafleet import ParallelConsumer, Record
from tests.conftest import ConfigFactory, TopicFactory
from tests.infra.records import ProduceReport
from tests.infra.waiting import wait_until

SLOW = 1_500


def test_records_handled_before_a_slow_one_are_committed_while_it_runs(
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    consumer_config: ConfigFactory,
    start_consumer: Callable[..., ParallelConsumer],
    committed_offsets: Callable[[str, str, int], dict[int, int]],
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, 2_000)
    slow_started, release = threading.Event(), threading.Event()

    def handle(record: Record) -> None:  # fast, so the Executor takes long runs of records
        if record.offset == SLOW:
            slow_started.set()
            release.wait(60)

    config = consumer_config(topic, ordering="partition", commit_interval_ms=100)
    start_consumer(config, handle)
    assert slow_started.wait(60), f"offset {SLOW} never reached its handler"
    try:
        wait_until(
            lambda: committed_offsets(config.group_id, topic, 1).get(0) == SLOW,
            15,
            f"offsets below {SLOW} to be committed while {SLOW} is in its handler "
            f"(committed: {committed_offsets(config.group_id, topic, 1)})",
            every=0.5,
        )
    finally:
        release.set()
