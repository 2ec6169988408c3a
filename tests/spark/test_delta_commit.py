"""Many partitions' batches in one Delta commit, each under its own transaction identifier, on a
real local Spark: one commit holds them all, a batch the table holds already is left out, an
overlapping range is replaced, a concurrent commit of the same partition fails this one, and one
of other partitions does not; the sink writes its ready exactly-once batches so, and one
partition's batch a commit where it cannot (Spark Connect, a Delta whose API differs)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession

from kafleet.config.spark import SparkSettings
from kafleet.engine.record import Record
from kafleet.spark import delta_commit, delta_log
from kafleet.spark.batcher import Batch
from kafleet.spark.delta_commit import (
    DeltaTransactions,
    UnsupportedDeltaError,
    combined_predicate,
)
from kafleet.spark.jobs import BatchInfo
from kafleet.spark.sink import SparkSink
from tests.infra import spark as spark_infra

TOPIC = "orders"


def rows(partition: int, first: int, last: int) -> pa.Table:
    offsets = list(range(first, last + 1))
    return pa.table(
        {
            "kafka_topic": pa.array([TOPIC] * len(offsets)),
            "kafka_partition": pa.array([partition] * len(offsets), pa.int32()),
            "kafka_offset": pa.array(offsets, pa.int64()),
        }
    )


def piece(partition: int, first: int, last: int) -> BatchInfo:
    return BatchInfo("billing", TOPIC, partition, first, last, last - first + 1, 0, None)


def frames(spark: SparkSession) -> Any:
    def data(fresh: list[BatchInfo]) -> DataFrame:
        tables = [rows(s.partition, s.first_offset, s.last_offset) for s in fresh]
        return spark.createDataFrame(pa.concat_tables(tables))

    return data


def commits(path: str) -> list[list[dict[str, Any]]]:
    log = sorted((Path(path) / "_delta_log").glob("*.json"))
    return [[json.loads(line) for line in file.read_text().splitlines()] for file in log]


def offsets_in(spark: SparkSession, path: str) -> list[tuple[int, int]]:
    got = spark.read.format("delta").load(path).select("kafka_partition", "kafka_offset")
    return sorted((r.kafka_partition, r.kafka_offset) for r in got.collect())


def test_several_partitions_batches_land_in_one_commit_with_an_identifier_each(
    spark: SparkSession, table: str
) -> None:
    delta = DeltaTransactions(spark)
    slices = [piece(p, 0, 99) for p in range(4)]

    written = delta.commit(table, slices, frames(spark), ("kafka_topic", "kafka_partition"))
    written += delta.commit(table, [piece(p, 100, 149) for p in range(4)], frames(spark))

    assert len(written) == 8
    log = commits(table)
    assert len(log) == 2
    assert [a["txn"]["version"] for a in log[1] if "txn" in a] == [149] * 4
    assert [a["commitInfo"]["operation"] for a in log[1] if "commitInfo" in a] == ["WRITE"]
    assert offsets_in(spark, table) == [(p, o) for p in range(4) for o in range(150)]
    reader = delta_log.TransactionLog(table, "billing/")
    assert reader.versions(spark, [s.app_id for s in slices]) == {s.app_id: 149 for s in slices}


def test_a_writer_thread_without_an_active_session_reads_a_checkpointed_table_and_commits(
    spark: SparkSession, table: str
) -> None:
    """A worker builds its session in the thread that first needs it (the Poller's, reading
    the table on assignment); its writer threads have no active session on the JVM side. CI's
    case (a worker restarted on a table other processes wrote, DELTA_SPARK_SESSION_NOT_SET
    from Delta's own threads) was reproduced on that table only: this in-process table passes
    without the fix too, so it guards the thread case, not that failure."""
    delta = DeltaTransactions(spark)
    layout = ("kafka_topic", "kafka_partition")
    delta.commit(table, [piece(0, 0, 9)], frames(spark), layout)
    spark.sql(f"ALTER TABLE delta.`{table}` SET TBLPROPERTIES ('delta.checkpointInterval' = '2')")
    for first in range(10, 50, 10):
        delta.commit(table, [piece(0, first, first + 9)], frames(spark))
    assert list((Path(table) / "_delta_log").glob("*.checkpoint.parquet"))
    jvm = spark._jvm
    assert jvm is not None
    jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()  # as in a process that never read it
    done: list[list[BatchInfo]] = []

    def write() -> None:
        jvm.org.apache.spark.sql.SparkSession.clearActiveSession()
        done.append(delta.commit(table, [piece(0, 50, 59)], frames(spark)))

    writer = threading.Thread(target=write)
    writer.start()
    writer.join(180)

    assert done == [[piece(0, 50, 59)]]
    assert offsets_in(spark, table) == [(0, o) for o in range(60)]


def test_a_batch_the_table_holds_already_is_left_out_and_the_others_written(
    spark: SparkSession, table: str
) -> None:
    delta = DeltaTransactions(spark)
    delta.commit(table, [piece(0, 0, 9), piece(1, 0, 9)], frames(spark))

    again = delta.commit(table, [piece(0, 0, 9), piece(1, 0, 9)], frames(spark))
    mixed = delta.commit(table, [piece(0, 0, 9), piece(2, 0, 9)], frames(spark))

    assert again == []
    assert mixed == [piece(2, 0, 9)]
    assert len(commits(table)) == 2
    assert offsets_in(spark, table) == [(p, o) for p in range(3) for o in range(10)]


def test_an_overlapping_range_a_stale_writer_left_is_replaced_not_doubled(
    spark: SparkSession, table: str
) -> None:
    delta = DeltaTransactions(spark)
    delta.commit(table, [piece(0, 0, 19), piece(1, 0, 19)], frames(spark))

    delta.commit(table, [piece(0, 10, 29), piece(1, 15, 39)], frames(spark))

    assert offsets_in(spark, table) == [(0, o) for o in range(30)] + [(1, o) for o in range(40)]


def test_a_concurrent_commit_of_the_same_partition_fails_this_one(
    spark: SparkSession, table: str
) -> None:
    delta = DeltaTransactions(spark)
    delta.commit(table, [piece(0, 0, 9), piece(1, 0, 9)], frames(spark))

    def raced(
        fresh: list[BatchInfo],
    ) -> DataFrame:  # a stale owner of partition 1 commits meanwhile
        (
            spark.createDataFrame(rows(1, 10, 19))
            .write.format("delta")
            .mode("append")
            .option("txnAppId", piece(1, 0, 0).app_id)
            .option("txnVersion", 19)
            .save(table)
        )
        return frames(spark)(fresh)

    with pytest.raises(Exception, match="ConcurrentTransactionException"):
        delta.commit(table, [piece(0, 10, 19), piece(1, 10, 19)], raced)
    assert offsets_in(spark, table) == [(0, o) for o in range(10)] + [(1, o) for o in range(20)]


def test_a_concurrent_commit_of_other_partitions_does_not_fail_this_one(
    spark: SparkSession, table: str
) -> None:
    delta = DeltaTransactions(spark)
    layout = ("kafka_topic", "kafka_partition")
    delta.commit(table, [piece(p, 0, 9) for p in range(3)], frames(spark), layout)

    def beside(fresh: list[BatchInfo]) -> DataFrame:  # another worker writes partition 2 meanwhile
        delta.commit(table, [piece(2, 10, 19)], frames(spark))
        return frames(spark)(fresh)

    written = delta.commit(table, [piece(0, 10, 19), piece(1, 10, 19)], beside)

    assert written == [piece(0, 10, 19), piece(1, 10, 19)]
    assert offsets_in(spark, table) == [(p, o) for p in range(3) for o in range(20)]


def test_a_session_without_a_jvm_in_this_process_cannot_commit_several_identifiers() -> None:
    connect_like = SimpleNamespace(client=object())  # what a Spark Connect session lacks

    with pytest.raises(UnsupportedDeltaError, match="Spark Connect"):
        DeltaTransactions(connect_like)  # type: ignore[arg-type]


def test_the_combined_predicate_is_each_batchs_range_with_its_partition() -> None:
    predicate = combined_predicate([piece(0, 5, 9), BatchInfo("a", "it's", 3, 0, 1, 2, 2, None)])

    assert predicate == (
        "(kafka_topic = 'orders' AND kafka_partition = 0 AND kafka_offset BETWEEN 5 AND 9) OR "
        "(kafka_topic = 'it\\'s' AND kafka_partition = 3 AND kafka_offset BETWEEN 0 AND 1)"
    )


def batch_of(partition: int, first: int, last: int) -> Batch:
    records = [Record(TOPIC, partition, o, None, None) for o in range(first, last + 1)]
    rows = [[{"number": r.offset}] for r in records]
    return Batch(TOPIC, partition, first, last + 1, records, rows)


def exactly_once_sink(table: str) -> SparkSink:
    settings = SparkSettings(table=table, master="local[2]", jars=[str(spark_infra.JARS)])
    return SparkSink(settings, "billing", idempotent=True)


def test_the_sink_writes_ready_batches_of_several_partitions_in_one_commit(
    spark: SparkSession, table: str
) -> None:
    sink = exactly_once_sink(table)
    assert sink.max_batches_per_write > 1

    sink.write([sink.prepare(batch_of(p, 0, 9)) for p in range(3)])
    sink.write([sink.prepare(batch_of(p, 10, 19)) for p in range(3)])

    log = commits(table)
    assert len(log) == 2
    assert [a["txn"]["appId"] for a in log[1] if "txn" in a] == [
        f"billing/{TOPIC}/{p}" for p in range(3)
    ]
    assert sink.stored_offsets([(TOPIC, p) for p in range(3)]) == {(TOPIC, p): 20 for p in range(3)}
    metadata = next(a["metaData"] for a in log[0] if "metaData" in a)
    assert metadata["partitionColumns"] == ["kafka_topic", "kafka_partition"]


def test_a_delta_whose_api_differs_gets_one_commit_a_partition_and_loses_nothing(
    spark: SparkSession, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    unknown = (*delta_commit.METHODS, (delta_commit.TRANSACTION, "noSuchMethod", ()))
    monkeypatch.setattr(delta_commit, "METHODS", unknown)
    with pytest.raises(UnsupportedDeltaError, match="noSuchMethod"):
        DeltaTransactions(spark)
    sink = exactly_once_sink(table)

    sink.write([sink.prepare(batch_of(p, 0, 9)) for p in range(3)])

    assert len(commits(table)) == 3
    assert sink.max_batches_per_write == 1
    assert offsets_in(spark, table) == [(p, o) for p in range(3) for o in range(10)]


def test_a_spark_connect_sink_takes_one_partitions_batch_a_write(table: str) -> None:
    settings = SparkSettings(table=table, remote="sc://localhost:15002")

    assert SparkSink(settings, "billing", idempotent=True).max_batches_per_write == 1
    assert SparkSink(settings, "billing", idempotent=False).max_batches_per_write > 1
