"""The Spark test bed works: a local session writes and reads Delta tables, and Delta's
idempotent writes (txnAppId + txnVersion, what exactly-once shipping rests on) skip a batch
written again."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from pyspark.sql import SparkSession


def batch(offsets: range) -> pa.Table:
    return pa.table(
        {
            "topic": ["orders"] * len(offsets),
            "partition": [0] * len(offsets),
            "offset": list(offsets),
        }
    )


def test_a_delta_table_takes_arrow_batches_and_reads_them_back(
    spark: SparkSession, tmp_path: Path
) -> None:
    path = str(tmp_path / "table")

    spark.createDataFrame(batch(range(0, 5)).to_pandas()).write.format("delta").save(path)

    rows = spark.read.format("delta").load(path).orderBy("offset").collect()
    assert [(r.topic, r.partition, r.offset) for r in rows] == [("orders", 0, o) for o in range(5)]


def test_a_batch_written_again_with_the_same_transaction_version_is_skipped(
    spark: SparkSession, tmp_path: Path
) -> None:
    path = str(tmp_path / "table")

    def write(offsets: range, version: int) -> None:
        (
            spark.createDataFrame(batch(offsets).to_pandas())
            .write.format("delta")
            .mode("append")
            .option("txnAppId", "billing/orders/0")
            .option("txnVersion", version)
            .save(path)
        )

    write(range(0, 3), 2)
    write(range(0, 3), 2)  # a worker killed after the write, before its commit, writes again
    write(range(3, 6), 5)

    offsets = sorted(r.offset for r in spark.read.format("delta").load(path).collect())
    assert offsets == list(range(6))
