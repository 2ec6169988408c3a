"""Reading a Delta table's transaction versions: where exactly-once output ends, per writer.

Owns: the latest ``txnVersion`` the table holds for each ``txnAppId`` asked for, read through
Spark (so it works the same for an in-process session and a Spark Connect server, whose
storage the worker may not see) from the ``txn`` actions of the table's log: its JSON commits
and its checkpoints. Versions only grow for an app id (Delta skips a write whose version is
not above the last), so the largest found is the current one, whether its commit file was
cleaned up after a checkpoint or not. A table that does not exist yet holds nothing.

Does not own what the versions mean (``spark_sink.py``, ``poller.py``). Tables whose log uses
V2 checkpoints with sidecar files are not read: they are not Delta's default.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafleet.errors import SinkError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TXN_SCHEMA = "txn struct<appId: string, version: bigint>"


def transaction_versions(spark: SparkSession, table: str, app_ids: list[str]) -> dict[str, int]:
    """The latest version of each app id found in the table's log (absent: none written)."""
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as fn

    log_dir = table.rstrip("/") + "/_delta_log"
    try:
        commits = spark.read.schema(TXN_SCHEMA).option("pathGlobFilter", "*.json").json(log_dir)
        checkpoints = (
            spark.read.schema(TXN_SCHEMA)
            .option("pathGlobFilter", "*.checkpoint*.parquet")
            .parquet(log_dir)
        )
        found = (
            commits.unionByName(checkpoints)
            .where(fn.col("txn.appId").isin(app_ids))
            .groupBy(fn.col("txn.appId").alias("app"))
            .agg(fn.max("txn.version").alias("version"))
            .collect()
        )
    except AnalysisException as exc:
        if "PATH_NOT_FOUND" in str(exc) or "does not exist" in str(exc):
            return {}  # no table yet: nothing written
        raise SinkError(table, f"cannot read its log {log_dir}: {exc}") from exc
    return {str(row["app"]): int(row["version"]) for row in found}
