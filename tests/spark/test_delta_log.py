"""Where exactly-once output ends, read from a real Delta log without reading all of it: the
hint, its checkpoint (classic, multi-part or V2) and the commits after it give what a full
read of the log gives, and what Delta itself says; a worker's second read opens only the
commits after the version it read; a log cleaned up after a checkpoint, a stale hint, a table
written anew and a Spark Connect session are all read right."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from kafleet.config.spark import SparkSettings
from kafleet.spark import delta_log
from kafleet.spark.delta_log import (
    Checkpoint,
    TransactionLog,
    commit_name,
    hinted_checkpoint,
    newest_complete_checkpoint,
)
from kafleet.spark.sink import SparkSink
from tests.infra import spark as spark_infra
from tests.infra.spark import ConnectServer

APPS = ["g/orders/0", "g/orders/1", "g/orders/2"]


def commit(spark: SparkSession, path: str, app: str, version: int, **properties: str) -> None:
    """One Delta commit (an idempotent append) recording ``version`` for ``app``."""
    writer = (
        spark.createDataFrame([(version,)], "n long")
        .write.format("delta")
        .mode("append")
        .option("txnAppId", app)
        .option("txnVersion", version)
    )
    for key, value in properties.items():  # table properties, on the first commit
        writer = writer.option(key, value)
    writer.save(path)


def commits(spark: SparkSession, path: str, count: int, **properties: str) -> None:
    """``count`` commits; commit ``i`` records version ``10 * i`` for ``APPS[i % 3]``."""
    for i in range(count):
        commit(spark, path, APPS[i % 3], 10 * i, **(properties if i == 0 else {}))


def full_read(path: str) -> dict[str, int]:
    """Every JSON commit, in order: the latest txn of each app id (what the log says)."""
    found: dict[str, int] = {}
    for file in sorted(Path(path, "_delta_log").glob("*.json")):
        if ".checkpoint." in file.name:
            continue
        for line in file.read_text().splitlines():
            txn = json.loads(line).get("txn")
            if txn:
                found[txn["appId"]] = txn["version"]
    return found


def delta_says(spark: SparkSession, path: str) -> dict[str, int]:
    """What Delta's own snapshot of the table holds (its JVM, through Py4J)."""
    jvm: Any = spark._jvm
    snapshot = jvm.org.apache.spark.sql.delta.DeltaLog.forTableWithSnapshot(
        spark._jsparkSession, path
    )._2()
    return dict(jvm.scala.jdk.javaapi.CollectionConverters.asJava(snapshot.transactions()))


def log_names(path: str) -> list[str]:
    return sorted(p.name for p in Path(path, "_delta_log").iterdir() if p.is_file())


def rewrite(file: Path, text: str) -> None:
    """Change a log file by hand (and drop the local file system's checksum of it)."""
    file.with_name(f".{file.name}.crc").unlink(missing_ok=True)
    file.write_text(text)


def lie_in(path: str, versions: range, app: str) -> None:
    """Rewrite commits so that they claim a version no one wrote: reading one shows."""
    for version in versions:
        file = Path(path, "_delta_log", commit_name(version))
        rewrite(file, json.dumps({"txn": {"appId": app, "version": 999_999}}) + "\n")


@pytest.fixture
def multi_part(spark: SparkSession) -> Iterator[None]:
    """Delta writes checkpoints of two actions per part while this is set."""
    spark.conf.set("spark.databricks.delta.checkpoint.partSize", "2")
    yield
    spark.conf.unset("spark.databricks.delta.checkpoint.partSize")


# -- pure: checkpoint names ------------------------------------------------------------------


def test_the_hint_names_a_classic_a_multi_part_or_a_v2_checkpoint() -> None:
    assert hinted_checkpoint(6, None, None) == Checkpoint(
        6, ("00000000000000000006.checkpoint.parquet",)
    )
    assert hinted_checkpoint(6, 2, None).files == (
        "00000000000000000006.checkpoint.0000000001.0000000002.parquet",
        "00000000000000000006.checkpoint.0000000002.0000000002.parquet",
    )
    v2 = "00000000000000000006.checkpoint.80a083e8-7026-4e79-81be-64bd76c43a11.json"
    assert hinted_checkpoint(6, None, v2).files == (v2,)


def test_a_listing_gives_the_newest_complete_checkpoint() -> None:
    single = "00000000000000000010.checkpoint.parquet"
    parts = [f"00000000000000000020.checkpoint.000000000{i}.0000000003.parquet" for i in (1, 2, 3)]
    uuid = "00000000000000000030.checkpoint.80a083e8-7026-4e79-81be-64bd76c43a11.parquet"

    assert newest_complete_checkpoint([]) is None
    assert newest_complete_checkpoint([f"file:/t/_delta_log/{single}"]) == Checkpoint(10, (single,))
    assert newest_complete_checkpoint([single, *parts]) == Checkpoint(20, tuple(parts))
    assert newest_complete_checkpoint([single, *parts[:2]]) == Checkpoint(10, (single,))
    assert newest_complete_checkpoint([single, *parts, uuid]) == Checkpoint(30, (uuid,))
    assert newest_complete_checkpoint(["00000000000000000020.json", "_last_checkpoint"]) is None


# -- a real log, read through a local Spark ---------------------------------------------------


def test_a_log_with_checkpoints_is_read_from_the_hint_its_checkpoint_and_later_commits(
    spark: SparkSession, table: str
) -> None:
    commits(spark, table, 9, **{"delta.checkpointInterval": "3"})  # checkpoints at 3 and 6

    log = TransactionLog(table)
    versions = log.versions(spark, APPS)

    assert versions == full_read(table) == delta_says(spark, table)
    assert versions == {"g/orders/0": 60, "g/orders/1": 70, "g/orders/2": 80}
    assert log.last_read.files == [
        "_last_checkpoint",
        "00000000000000000006.checkpoint.parquet",
        "00000000000000000007.json",
        "00000000000000000008.json",
    ]
    assert not log.last_read.listed


def test_a_log_of_json_commits_only_is_read_from_its_first_commit(
    spark: SparkSession, table: str
) -> None:
    commits(spark, table, 4)  # no checkpoint yet (Delta's interval is 10), so no hint

    log = TransactionLog(table)

    assert log.versions(spark, APPS) == full_read(table) == delta_says(spark, table)
    assert log.last_read.files == [commit_name(v) for v in range(4)]
    assert log.last_read.listed  # no hint: Delta lists the log then too


def test_a_multi_part_checkpoint_is_read_with_all_its_parts(
    spark: SparkSession, table: str, multi_part: None
) -> None:
    commits(spark, table, 5, **{"delta.checkpointInterval": "3"})

    log = TransactionLog(table)

    assert log.versions(spark, APPS) == full_read(table) == delta_says(spark, table)
    parts = [n for n in log.last_read.files if ".checkpoint." in n]
    assert len(parts) > 1
    assert parts == sorted(
        n for n in log_names(table) if n.startswith("00000000000000000003.checkpoint")
    )


def test_a_v2_checkpoint_is_read_from_its_top_level_file_never_its_sidecars(
    spark: SparkSession, table: str
) -> None:
    commits(spark, table, 5, **{"delta.checkpointInterval": "3", "delta.checkpointPolicy": "v2"})
    sidecars = list(Path(table, "_delta_log", "_sidecars").glob("*.parquet"))

    log = TransactionLog(table)

    assert log.versions(spark, APPS) == full_read(table) == delta_says(spark, table)
    assert sidecars  # Delta wrote the checkpoint's add actions into sidecars
    (top,) = [n for n in log.last_read.files if ".checkpoint." in n]
    assert top.startswith("00000000000000000003.checkpoint.")
    assert top.endswith(".json")
    assert not {s.name for s in sidecars} & set(log.last_read.files)


def test_commits_that_the_checkpoint_covers_are_never_opened(
    spark: SparkSession, table: str
) -> None:
    """What on_assign calls: made to lie, the commits before the checkpoint change nothing."""
    commits(spark, table, 9, **{"delta.checkpointInterval": "3"})
    truth = full_read(table)
    lie_in(table, range(1, 6), "g/orders/0")  # the checkpoint at 6 holds what they said
    sink = SparkSink(
        SparkSettings(table=table, master="local[2]", jars=[str(spark_infra.JARS)]), "g"
    )

    stored = sink.stored_offsets([("orders", 0), ("orders", 1), ("orders", 2)])

    assert stored == {("orders", p): truth[f"g/orders/{p}"] + 1 for p in range(3)}


def test_a_second_read_opens_only_the_commits_after_the_version_read(
    spark: SparkSession, table: str
) -> None:
    commits(spark, table, 5, **{"delta.checkpointInterval": "3"})
    sink = SparkSink(
        SparkSettings(table=table, master="local[2]", jars=[str(spark_infra.JARS)]), "g"
    )
    log = TransactionLog(table, "g/")
    assert sink.stored_offsets([("orders", 0)]) == {("orders", 0): 31}
    assert log.versions(spark, APPS)["g/orders/0"] == 30
    commit(spark, table, "g/orders/0", 50)  # 5
    commit(spark, table, "g/orders/1", 60)  # 6, and Delta's checkpoint at 6
    lie_in(table, range(5), "g/orders/0")  # read already: the next reads must not reopen them

    assert sink.stored_offsets([("orders", 0), ("orders", 1)]) == {
        ("orders", 0): 51,
        ("orders", 1): 61,
    }
    assert log.versions(spark, APPS) == {"g/orders/0": 50, "g/orders/1": 60, "g/orders/2": 20}
    assert log.last_read.files == ["_last_checkpoint", commit_name(5), commit_name(6)]


def test_a_checkpoint_far_past_the_version_read_is_read_instead_of_the_commits_before_it(
    spark: SparkSession, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(delta_log, "REPLAY_LIMIT", 1)  # instead of 32 commits
    commits(spark, table, 5, **{"delta.checkpointInterval": "3"})
    log = TransactionLog(table)
    log.versions(spark, APPS)
    for i in range(5, 9):
        commit(spark, table, APPS[i % 3], 10 * i)  # Delta's checkpoint at 6

    assert log.versions(spark, APPS) == full_read(table)
    assert log.last_read.files == [
        "_last_checkpoint",
        "00000000000000000006.checkpoint.parquet",
        commit_name(7),
        commit_name(8),
    ]


def test_commits_deleted_by_log_cleanup_after_a_checkpoint_leave_the_answer_unchanged(
    spark: SparkSession, table: str
) -> None:
    commits(spark, table, 9, **{"delta.checkpointInterval": "3"})
    truth = full_read(table)
    for name in log_names(table):  # Delta's cleanup: everything before the checkpoint at 6
        if name[:20].isdigit() and int(name[:20]) < 6:
            Path(table, "_delta_log", name).unlink()

    log = TransactionLog(table)

    assert log.versions(spark, APPS) == truth == delta_says(spark, table)


def test_a_stale_hint_is_read_on_from_and_one_naming_a_deleted_checkpoint_is_listed_past(
    spark: SparkSession, table: str
) -> None:
    commits(spark, table, 9, **{"delta.checkpointInterval": "3"})
    truth = full_read(table)
    hint = Path(table, "_delta_log", "_last_checkpoint")
    rewrite(hint, json.dumps({"version": 3, "size": 1}))  # a checkpoint at 6 exists too

    stale = TransactionLog(table)
    assert stale.versions(spark, APPS) == truth
    assert stale.last_read.files[:2] == [
        "_last_checkpoint",
        "00000000000000000003.checkpoint.parquet",
    ]
    assert not stale.last_read.listed

    Path(table, "_delta_log", "00000000000000000003.checkpoint.parquet").unlink()
    gone = TransactionLog(table)
    assert gone.versions(spark, APPS) == truth
    assert gone.last_read.listed
    assert "00000000000000000006.checkpoint.parquet" in gone.last_read.files


def test_a_table_not_written_yet_holds_nothing(spark: SparkSession, table: str) -> None:
    assert TransactionLog(table).versions(spark, APPS) == {}


def test_a_table_written_anew_under_the_same_path_is_read_afresh(
    spark: SparkSession, table: str
) -> None:
    commits(spark, table, 5, **{"delta.checkpointInterval": "3"})
    log = TransactionLog(table)
    assert log.versions(spark, APPS)["g/orders/0"] == 30
    shutil.rmtree(table)
    commits(spark, table, 2)

    assert log.versions(spark, APPS) == full_read(table) == {"g/orders/0": 0, "g/orders/1": 10}


@pytest.fixture
def connect_mode_undone() -> Iterator[None]:
    """A Connect session in this process sets these variables, and from then on pyspark
    builds Connect columns and sessions even for the local session of the tests that follow:
    put them back as they were."""
    names = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")
    before = {name: os.environ.get(name) for name in names}
    yield
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.mark.usefixtures("connect_mode_undone")
def test_through_spark_connect_the_log_is_listed_once_then_only_new_commits_are_read(
    spark: SparkSession, spark_connect: ConnectServer, table: str
) -> None:
    """Spark Connect cannot read the hint (Spark skips files named ``_...``): a first read
    lists the checkpoints' names; later ones ask for the next commits by name."""
    commits(spark, table, 8, **{"delta.checkpointInterval": "3"})
    remote = SparkSession.builder.remote(spark_connect.url).create()
    try:
        log = TransactionLog(table)
        assert log.versions(remote, APPS) == full_read(table)
        assert log.last_read.listed
        assert log.last_read.files == [
            "00000000000000000006.checkpoint.parquet",
            commit_name(7),
        ]
        commit(spark, table, "g/orders/0", 80)  # 8
        commit(spark, table, "g/orders/1", 90)  # 9, and a checkpoint
        lie_in(table, range(8), "g/orders/0")  # read already

        assert log.versions(remote, APPS) == {"g/orders/0": 80, "g/orders/1": 90, "g/orders/2": 50}
        assert not log.last_read.listed
        assert log.last_read.files == [commit_name(8), commit_name(9)]
    finally:
        remote.stop()
