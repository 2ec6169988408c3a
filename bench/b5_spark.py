"""B5: from Kafka into a Delta table through Spark. The same 1,000,000 records of ~100 bytes on
12 partitions go through Spark Structured Streaming's Kafka source (``availableNow``, a
trivial projection, one micro-batch per trigger) and through kafleet into the Delta sink, with
an identity handler (of one record; of a batch, giving a list of dicts or an Arrow table; the
table one also exactly-once) and again with a 2 ms I/O wait per record; all in one local[2]
Spark session on this machine. kafleet's batches are sized for a backlog (``BATCH``); one row
keeps the earlier sizing to show what the size does. Each
is timed from its start (group join and Spark jobs included) until every record is in the
table, then the table is counted.

Structured Streaming with the 2 ms wait (a Python UDF that sleeps) runs one record at a time
per task, two tasks on two cores: it is measured on a 20,000-record topic, and its rate is
what 1,000,000 records would see.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
from confluent_kafka import Message
from pyspark.sql import SparkSession

from bench.harness import Context, Table, backlog
from kafleet import ParallelConsumer, Record, batch_handler, load_config
from tests.infra import spark as spark_infra

PARTITIONS = 12
IO_S = 0.002
# Results a partition may hold, records per batch, batches written at once: sized for a
# backlog (fewer, larger commits: one costs about a second whatever its size); one row keeps
# the earlier sizing, 20,000 and 2 writers.
BATCH = 100_000
WRITERS = 1


def identity(record: Record) -> dict[str, Any]:
    return {"key": record.key, "value": record.value}


@batch_handler
def identity_batch(messages: list[Message]) -> list[dict[str, Any]]:
    return [{"key": m.key(), "value": m.value()} for m in messages]


@batch_handler
def identity_table(messages: list[Message]) -> pa.Table:
    """The identity as columns: an Arrow table, one row per message."""
    return pa.table(
        {
            "key": pa.array([m.key() for m in messages], pa.binary()),
            "value": pa.array([m.value() for m in messages], pa.binary()),
        }
    )


def io_wait(record: Record) -> dict[str, Any]:
    time.sleep(IO_S)
    return {"key": record.key, "value": record.value}


def time_structured_streaming(
    spark: SparkSession, bootstrap: str, topic: str, path: Path, udf_sleep: bool = False
) -> float:
    from pyspark.sql import functions as fn
    from pyspark.sql.types import BinaryType

    started = time.monotonic()
    source = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    value = fn.col("value")
    if udf_sleep:

        @fn.udf(returnType=BinaryType())  # type: ignore[misc]
        def slow(v: bytes) -> bytes:
            time.sleep(IO_S)
            return v

        value = slow(value)
    query = (
        source.select("key", value.alias("value"), "topic", "partition", "offset", "timestamp")
        .writeStream.format("delta")
        .option("checkpointLocation", str(path / "_checkpoint"))
        .trigger(availableNow=True)
        .start(str(path / "table"))
    )
    query.awaitTermination()
    return time.monotonic() - started


def time_kafleet_delta(
    ctx: Context,
    topic: str,
    count: int,
    path: Path,
    handler: Any,
    batch: int = BATCH,
    writers: int = WRITERS,
    **fields: Any,
) -> float:
    config = load_config(
        None,
        {
            "bootstrap_servers": ctx.bootstrap,
            "group_id": f"bench-{uuid.uuid4().hex}",
            "topics": [topic],
            "max_poll_records": 5000,
            "queue": {"max_records": batch, "max_bytes": batch * 1600},
            "spark": {
                "table": str(path / "table"),
                "master": "local[2]",
                "batch": {"max_records": batch, "linger_ms": 1000},
                "writers": writers,
            },
            **fields,
        },
    )
    started = time.monotonic()
    consumer = ParallelConsumer(config, handler).start()
    try:
        deadline = started + 1800
        while consumer.stats.sink_records < count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"kafleet wrote {consumer.stats.sink_records} of {count}")
            time.sleep(0.1)
        return time.monotonic() - started
    finally:
        consumer.close(grace_s=10)


def run(ctx: Context) -> Table:
    count = ctx.scale(1_000_000, 50_000)
    sample = ctx.scale(20_000, 5_000)
    topic = backlog(ctx, PARTITIONS, count)
    small = backlog(ctx, PARTITIONS, sample)
    spark = spark_infra.local_session("kafleet-bench", spark_infra.streaming_kafka_jars())
    work = Path(tempfile.mkdtemp(prefix="kafleet-b5-"))
    table = Table(
        "b5",
        f"into Delta: {count:,} records of 100 B, {PARTITIONS} partitions, local[2] Spark",
        ["pipeline", "records", "seconds", "records/s", "/ streaming", "rows in table"],
    )

    def add(name: str, records: int, seconds: float, baseline: float, path: Path) -> float:
        """A row: the rate, its ratio to ``baseline`` (records/s; 0: this is the baseline)
        and the rows the table holds. Returns the rate."""
        rate = records / seconds
        rows = spark.read.format("delta").load(str(path / "table")).count()
        table.add(name, records, seconds, rate, rate / baseline if baseline else 1.0, rows)
        return rate

    try:
        ss_s = time_structured_streaming(spark, ctx.bootstrap, topic, work / "ss")
        ss_rate = add("Structured Streaming, projection", count, ss_s, 0, work / "ss")
        seconds = time_kafleet_delta(
            ctx, topic, count, work / "k1", identity, ordering="partition", concurrency=12
        )
        add("kafleet, identity handler", count, seconds, ss_rate, work / "k1")
        seconds = time_kafleet_delta(
            ctx, topic, count, work / "k3", identity_batch, ordering="partition", concurrency=12
        )
        add("kafleet, identity batch handler", count, seconds, ss_rate, work / "k3")
        seconds = time_kafleet_delta(
            ctx, topic, count, work / "k5", identity_table, ordering="partition", concurrency=12
        )
        add("kafleet, identity batch handler, Arrow table", count, seconds, ss_rate, work / "k5")
        seconds = time_kafleet_delta(
            ctx,
            topic,
            count,
            work / "k6",
            identity_batch,
            batch=20_000,
            writers=2,
            ordering="partition",
            concurrency=12,
        )
        add(
            "kafleet, identity batch handler, batches of 20,000, 2 writers",
            count,
            seconds,
            ss_rate,
            work / "k6",
        )
        seconds = time_kafleet_delta(
            ctx,
            topic,
            count,
            work / "k4",
            identity_table,
            ordering="partition",
            concurrency=12,
            guarantee="exactly-once",
        )
        add("kafleet, Arrow table, exactly-once", count, seconds, ss_rate, work / "k4")
        ss_io_s = time_structured_streaming(spark, ctx.bootstrap, small, work / "ss2", True)
        ss_io_rate = add("Structured Streaming, 2 ms UDF", sample, ss_io_s, 0, work / "ss2")
        seconds = time_kafleet_delta(
            ctx, topic, count, work / "k2", io_wait, ordering="key", concurrency=64
        )
        add("kafleet, 2 ms I/O, key order, 64 threads", count, seconds, ss_io_rate, work / "k2")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        spark.stop()
    table.notes.append(
        "/ streaming: the rate over Structured Streaming's with the same handler "
        "(the projection, or the 2 ms wait)"
    )
    table.notes.append(f"ideal for the 2 ms wait: 64 threads / 2 ms = {64 / IO_S:,.0f} records/s")
    return table
