"""Handler results shipped in batches to a real local Spark: rows land in Delta with their
Kafka coordinates, a custom job gets true batch info, a slow job pauses partitions, and a
result that cannot be a row is dead-lettered while the rest flows."""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from pydantic import BaseModel
from pyspark.sql import DataFrame, SparkSession

from kafleet import ParallelConsumer, Record
from kafleet.spark.jobs import BatchInfo
from tests.conftest import ConfigFactory, TopicFactory
from tests.infra.records import ProduceReport, record_number
from tests.infra.spark import spark_fields
from tests.infra.waiting import wait_until


class Order(BaseModel):
    number: int
    doubled: int


def test_rows_land_in_delta_with_their_kafka_coordinates(
    spark: SparkSession,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    consumer_config: ConfigFactory,
    start_consumer: Callable[..., ParallelConsumer],
    committed_offsets: Callable[[str, str, int], dict[int, int]],
    table: str,
    table_rows: Callable[[str], list[tuple[str, int, int, int]]],
) -> None:
    topic = topic_factory(partitions=3)
    report = produce(topic, 600)
    config = consumer_config(topic, ordering="key", **spark_fields(table))

    def handle(record: Record) -> Order:  # a pydantic model: one row
        n = record_number(record.value or b"")
        return Order(number=n, doubled=2 * n)

    start_consumer(config, handle)
    wait_until(
        lambda: committed_offsets(config.group_id, topic, 3) == dict(report.per_partition),
        90,
        "every offset committed after its batch was written",
        every=0.5,
    )

    rows = table_rows(table)
    assert len(rows) == 600
    assert Counter((t, p, o) for t, p, o, _ in rows).most_common(1)[0][1] == 1
    got = spark.read.format("delta").load(table)
    assert got.where("doubled != 2 * number").count() == 0
    assert {f.name for f in got.schema} >= {
        "kafka_topic",
        "kafka_partition",
        "kafka_offset",
        "kafka_timestamp",
        "kafka_key",
    }
    reader = Consumer({"bootstrap.servers": config.bootstrap_servers, "group.id": "check"})
    reader.assign([TopicPartition(topic, p, 0) for p in range(3)])
    truth: dict[tuple[int, int], int] = {}
    while len(truth) < 600:
        for msg in reader.consume(600, timeout=2):
            truth[(msg.partition() or 0, msg.offset() or 0)] = record_number(msg.value() or b"")
    reader.close()
    assert {(p, o): n for _, p, o, n in rows} == truth  # each row names its own record


def test_a_custom_job_gets_each_batch_with_its_partition_and_offsets(
    spark: SparkSession,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    consumer_config: ConfigFactory,
    start_consumer: Callable[..., ParallelConsumer],
    committed_offsets: Callable[[str, str, int], dict[int, int]],
    table: str,
) -> None:
    topic = topic_factory(partitions=2)
    report = produce(topic, 400)
    seen: list[tuple[BatchInfo, int, int, int, set[int]]] = []
    lock = threading.Lock()

    def job(df: DataFrame, info: BatchInfo) -> None:
        stats = df.selectExpr(
            "count(*)", "min(kafka_offset)", "max(kafka_offset)", "collect_set(kafka_partition)"
        ).first()
        assert stats is not None
        with lock:
            seen.append((info, stats[0], stats[1], stats[2], set(stats[3])))

    config = consumer_config(
        topic,
        ordering="unordered",
        **spark_fields(table, batch={"max_records": 50, "linger_ms": 100}, idempotent=True),
    )
    start_consumer(config, lambda r: {"n": record_number(r.value or b"")}, job=job)
    wait_until(
        lambda: committed_offsets(config.group_id, topic, 2) == dict(report.per_partition),
        90,
        "every offset committed",
        every=0.5,
    )

    with lock:
        batches = list(seen)
    assert sum(rows for _, rows, _, _, _ in batches) == 400
    for info, rows, low, high, partitions in batches:
        assert partitions == {info.partition}
        assert (info.first_offset, info.last_offset) == (low, high)
        assert info.records == info.rows == rows <= 50
        assert info.app_id == f"{config.group_id}/{topic}/{info.partition}"
        assert info.write_options == {"txnAppId": info.app_id, "txnVersion": str(high)}
    for partition in (0, 1):
        ranges = sorted(
            (i.first_offset, i.last_offset) for i, *_ in batches if i.partition == partition
        )
        assert ranges[0][0] == 0
        assert all(b[0] == a[1] + 1 for a, b in itertools.pairwise(ranges))


def test_a_slow_spark_job_pauses_partitions_instead_of_growing_memory(
    spark: SparkSession,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    consumer_config: ConfigFactory,
    start_consumer: Callable[..., ParallelConsumer],
    committed_offsets: Callable[[str, str, int], dict[int, int]],
    table: str,
) -> None:
    topic = topic_factory(partitions=2)
    report = produce(topic, 1_000)
    written = Counter[int]()

    def slow_job(df: DataFrame, info: BatchInfo) -> None:
        time.sleep(1.0)
        written[info.partition] += info.rows

    config = consumer_config(
        topic,
        max_poll_records=20,
        queue={"max_records": 100},
        **spark_fields(table, batch={"max_records": 100, "linger_ms": 50}, writers=1),
    )
    consumer = start_consumer(config, lambda r: {"n": 1}, job=slow_job)
    most_held, paused_seen = 0, False
    deadline = time.monotonic() + 8  # a batch a second: at most 800 written by then
    while time.monotonic() < deadline:
        parts = consumer.snapshot()["partitions"].values()
        most_held = max([most_held, *(p["queued"] + p["held"] for p in parts)])
        paused_seen = paused_seen or any(p["paused"] for p in parts)
        time.sleep(0.02)

    assert paused_seen
    assert most_held <= 100 + 20  # the bound plus one poll, however slow the job
    assert sum(written.values()) < 1_000  # the job, not the handler, set the pace
    wait_until(
        lambda: committed_offsets(config.group_id, topic, 2) == dict(report.per_partition),
        120,
        "every offset committed once the job caught up",
        every=0.5,
    )


def test_a_result_that_cannot_be_a_row_is_dead_lettered_while_the_rest_lands(
    spark: SparkSession,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    consumer_config: ConfigFactory,
    start_consumer: Callable[..., ParallelConsumer],
    committed_offsets: Callable[[str, str, int], dict[int, int]],
    table: str,
    table_rows: Callable[[str], list[tuple[str, int, int, int]]],
) -> None:
    topic = topic_factory(partitions=2)
    report = produce(topic, 200)
    dlt = topic_factory(partitions=1)

    def handle(record: Record) -> Any:
        n = record_number(record.value or b"")
        return 42 if n == 77 else {"number": n}  # 42 is not a row

    config = consumer_config(
        topic,
        dead_letter_topic=dlt,
        retry={"max_attempts": 2, "initial_backoff_ms": 10},
        **spark_fields(table),
    )
    consumer = start_consumer(config, handle)
    wait_until(
        lambda: committed_offsets(config.group_id, topic, 2) == dict(report.per_partition),
        90,
        "every offset committed, the poison record's too",
        every=0.5,
    )

    assert sorted(n for *_, n in table_rows(table)) == [n for n in range(200) if n != 77]
    assert consumer.stats.dead_lettered == 1


def test_a_second_worker_joining_mid_stream_leaves_every_record_in_the_table_once(
    spark: SparkSession,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    consumer_config: ConfigFactory,
    start_consumer: Callable[..., ParallelConsumer],
    committed_offsets: Callable[[str, str, int], dict[int, int]],
    table: str,
    table_rows: Callable[[str], list[tuple[str, int, int, int]]],
) -> None:
    """Exactly-once across a rebalance: the revoked partitions' done results are written
    before their offsets are committed, and the new owner resumes after them. The table the
    first write created is partitioned by topic and partition, so the two workers' writes
    (each replacing its own range) never fail each other (Delta's ConcurrentAppendException
    on an unpartitioned table)."""
    topic = topic_factory(partitions=4)
    report = produce(topic, 8_000)
    config = consumer_config(topic, guarantee="exactly-once", **spark_fields(table))

    def handle(record: Record) -> dict[str, int]:
        time.sleep(0.01)  # 4 partitions, one at a time each: 20 s in all, so the second
        # worker joins with work left even on a busy machine
        return {"number": record_number(record.value or b"")}

    first = start_consumer(config, handle)
    wait_until(lambda: first.stats.sink_records >= 300, 60, "300 records written", every=0.2)
    second = start_consumer(config, handle)
    wait_until(
        lambda: committed_offsets(config.group_id, topic, 4) == dict(report.per_partition),
        120,
        "every offset committed",
        every=0.5,
    )

    assert first.stats.revoked >= 1  # the first worker handed partitions over
    assert second.stats.sink_records > 0  # and the second wrote some
    [detail] = spark.sql(f"DESCRIBE DETAIL delta.`{table}`").collect()
    assert detail["partitionColumns"] == ["kafka_topic", "kafka_partition"]
    assert first.stats.sink_write_failures == second.stats.sink_write_failures == 0
    rows = table_rows(table)
    assert sorted(n for *_, n in rows) == list(range(8_000))
