"""A share-mode worker ships its results to a real local Spark: at-least-once, every record's
row in Delta with its Kafka coordinates, written before the record is accepted; a sink that
cannot write in time releases the records for another delivery, nothing lost."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pyspark.sql import SparkSession

from kafleet import Record, ShareConsumer
from kafleet.errors import ResultError
from kafleet.spark.shipping import BatchWriter
from tests.conftest import ConfigFactory, TopicFactory
from tests.infra import spark as spark_infra
from tests.infra.records import ProduceReport, record_number
from tests.infra.waiting import wait_until
from tests.share.conftest import read_topic


@pytest.fixture
def start_share() -> Iterator[Callable[..., ShareConsumer]]:
    started: list[ShareConsumer] = []

    def start(*args: Any, **kwargs: Any) -> ShareConsumer:
        consumer = ShareConsumer(*args, **kwargs).start()
        started.append(consumer)
        return consumer

    yield start
    for consumer in started:
        consumer.stop(grace_s=5)
        consumer.wait(timeout=30)


def number_row(record: Record) -> dict[str, int]:
    return {"number": record_number(record.value or b"")}


def test_two_share_consumers_on_one_partition_write_every_record_once_to_delta(
    spark: SparkSession,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    share_config: ConfigFactory,
    start_share: Callable[..., ShareConsumer],
    table: str,
    table_rows: Callable[[str], list[tuple[str, int, int, int]]],
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, 300)
    config = share_config(
        topic,
        max_poll_records=4,
        concurrency=8,
        processing_timeout_s=60.0,  # the lock covers the handler and the poll's write
        share={"consumers": 2},
        spark={"table": table, "master": "local[2]", "jars": [str(spark_infra.JARS)]},
    )

    consumer = start_share(config, number_row)
    wait_until(lambda: consumer.counts.accepted >= 300, 120, "every record accepted", every=0.5)

    rows = table_rows(table)
    assert sorted(n for *_, n in rows) == list(range(300))
    assert Counter(o for _, _, o, _ in rows).most_common(1)[0][1] == 1
    assert consumer.stats.sink_batches >= 1
    assert consumer.counts.released == 0


class _DownThenUp:
    """A sink that fails its first writes, long enough to outlast one record lock."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.written: list[int] = []
        self.lock = threading.Lock()

    @property
    def max_batches_per_write(self) -> int:
        return 16

    def rows(self, record: Record, result: Any) -> list[dict[str, Any]]:
        return [result]

    def check_table(self, tp: Any, table: Any) -> None:
        pass

    def prepare(self, batch: Any) -> Any:
        return [row for rows in batch.rows for row in rows]

    def write(self, prepared: list[Any]) -> None:
        with self.lock:
            if self.failures > 0:
                self.failures -= 1
                raise ConnectionError("the sink is down")
            self.written += [row["number"] for rows in prepared for row in rows]


def test_results_the_sink_cannot_write_within_the_lock_are_released_and_done_again(
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    share_config: ConfigFactory,
    start_share: Callable[..., ShareConsumer],
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, 30)
    sink = _DownThenUp(failures=4)  # 0.5 + 1 + 2 s of waits: past a 2 s lock
    writer: BatchWriter = sink
    config = share_config(topic, max_poll_records=10, processing_timeout_s=2.0)

    consumer = start_share(config, number_row, sink=writer)
    wait_until(lambda: len(set(sink.written)) == 30, 90, "every result written", every=0.5)

    assert sorted(set(sink.written)) == list(range(30))
    assert consumer.counts.released >= 1
    assert consumer.counts.redelivered >= 1
    assert consumer.counts.archived == 0


def test_on_their_last_delivery_results_the_sink_cannot_write_are_parked_not_archived(
    kafka: str,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    share_config: ConfigFactory,
    start_share: Callable[..., ShareConsumer],
) -> None:
    topic, dead = topic_factory(partitions=1), topic_factory(partitions=1)
    produce(topic, 4)
    sink = _DownThenUp(failures=1_000)  # down for good
    config = share_config(
        topic,
        dead_letter_topic=dead,
        max_poll_records=4,
        processing_timeout_s=2.0,
        share={"delivery_limit": 2},
    )

    consumer = start_share(config, number_row, sink=sink)
    wait_until(lambda: consumer.counts.dead_lettered == 4, 60, "every record parked", every=0.5)

    assert sorted(record_number(m.value() or b"") for m in read_topic(kafka, dead, 4)) == [
        0,
        1,
        2,
        3,
    ]
    assert consumer.counts.archived == 0
    assert consumer.counts.released == 4  # once each, on the first delivery
    assert consumer.snapshot()["sink"]["failing_since"] is not None  # unready meanwhile


class _PickySink(_DownThenUp):
    """Takes every result but one, which cannot be a row."""

    def rows(self, record: Record, result: Any) -> list[dict[str, Any]]:
        if result["number"] == 7:
            raise ResultError(record, "no column fits")
        return [result]


def test_a_result_that_cannot_be_a_row_is_parked_and_its_neighbours_written(
    kafka: str,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    share_config: ConfigFactory,
    start_share: Callable[..., ShareConsumer],
) -> None:
    topic, dead = topic_factory(partitions=1), topic_factory(partitions=1)
    produce(topic, 20)
    sink = _PickySink(failures=0)

    consumer = start_share(share_config(topic, dead_letter_topic=dead), number_row, sink=sink)
    wait_until(lambda: len(sink.written) == 19, 60, "every other result written", every=0.5)

    [parked] = read_topic(kafka, dead, 1)
    assert record_number(parked.value() or b"") == 7
    assert sorted(sink.written) == [n for n in range(20) if n != 7]
    assert consumer.counts.released == 0
