"""A batch handler that returns an Arrow table, on a real broker and a real local Spark: every
record lands in Delta once, with its own Kafka coordinates, under every ordering and
guarantee, and its offsets are committed once written."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pyarrow as pa
import pytest
from confluent_kafka import Message

from kafleet import ParallelConsumer, batch_handler
from tests.conftest import ConfigFactory, TopicFactory
from tests.infra.records import ProduceReport, record_number
from tests.infra.spark import spark_fields
from tests.infra.waiting import wait_until


@batch_handler
def numbers(messages: list[Message]) -> pa.Table:
    return pa.table({"number": [record_number(m.value() or b"") for m in messages]})


@pytest.mark.parametrize(
    ("ordering", "guarantee"),
    [
        ("partition", "at-least-once"),
        ("key", "at-least-once"),
        ("unordered", "at-least-once"),
        ("key", "exactly-once"),
    ],
)
def test_every_record_of_a_table_returning_handler_lands_once_with_its_coordinates(
    ordering: str,
    guarantee: str,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    consumer_config: ConfigFactory,
    start_consumer: Callable[..., ParallelConsumer],
    committed_offsets: Callable[[str, str, int], dict[int, int]],
    table: str,
    table_rows: Callable[[str], list[tuple[str, int, int, int]]],
) -> None:
    topic = topic_factory(partitions=3)
    report = produce(topic, 900)
    config = consumer_config(
        topic,
        ordering=ordering,
        guarantee=guarantee,
        max_batch_records=50,
        **spark_fields(table),
    )

    consumer = start_consumer(config, numbers)
    wait_until(
        lambda: consumer.stats.sink_records >= 900,
        120,
        "every record written to the table",
        every=0.5,
    )
    if guarantee != "exactly-once":  # exactly-once keeps offsets in the table, not the group
        wait_until(
            lambda: committed_offsets(config.group_id, topic, 3) == dict(report.per_partition),
            60,
            "every offset committed after its batch was written",
            every=0.5,
        )

    rows = table_rows(table)
    assert len(rows) == 900
    assert Counter((t, p, o) for t, p, o, _ in rows).most_common(1)[0][1] == 1
    assert sorted(n for *_, n in rows) == list(range(900))
