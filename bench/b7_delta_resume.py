"""B7: where exactly-once resumes, read from a Delta table of 10,000 commits. What ``on_assign``
asks the sink (``SparkSink.stored_offsets``: the latest ``txnVersion`` of each partition) is
timed with the code before issue 11 (every JSON commit and checkpoint in ``_delta_log``, read
from git) and with the code after it (``_last_checkpoint``, that checkpoint and the later
commits; then, cached, only the newer commits), in a local[2] session and through a Spark
Connect server on the same machine.

The table: 11 commits written by kafleet's own Delta job (idempotent writes of 100 rows with
their Kafka coordinates; Delta checkpoints at version 10), then commits written as files in the
same format up to 10,000 (12 partitions, a batch each in turn) and a checkpoint every 10
commits, as Delta's default interval does, in the schema of Delta's own checkpoint. Delta's
snapshot of the table is checked against what was written before anything is timed.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from bench.harness import Context, Table
from kafleet.config.spark import SparkSettings
from kafleet.engine.record import Record
from kafleet.spark.batcher import Batch
from kafleet.spark.sink import SparkSink
from tests.infra import spark as spark_infra

PARTITIONS = 12
INTERVAL = 10  # Delta's default checkpoint interval
ROWS = 100  # per batch
BEFORE = "ba1b814355bb22d0ed7229900f9735ef9edbeaa1"  # delta_log.py before issue 11
GROUP = "bench"
WANTED = [("orders", p) for p in range(PARTITIONS)]


def old_reader() -> ModuleType:
    """``delta_log.py`` as it was before issue 11, from git."""
    root = Path(__file__).resolve().parent.parent
    source = subprocess.run(
        ["git", "show", f"{BEFORE}:consumer/kafleet/delta_log.py"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    spec = importlib.util.spec_from_loader("delta_log_before", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    exec(compile(source, "delta_log_before.py", "exec"), module.__dict__)
    return module


class LogBuilder:
    """A Delta table whose commits after the first few are written as files."""

    def __init__(self, spark: SparkSession, path: Path) -> None:
        self.spark, self.path, self.log = spark, path, path / "_delta_log"
        sink = SparkSink(SparkSettings(table=str(path), master="local[2]"), GROUP)
        self.txns: dict[str, int] = {}
        for version in range(INTERVAL + 1):  # by Delta: its commit format and checkpoint
            partition, last = version % PARTITIONS, self.offset(version)
            offsets = range(last - ROWS + 1, last + 1)
            records = [Record("orders", partition, o, b"k", b"v", (), 0) for o in offsets]
            rows = [[{"number": o}] for o in offsets]
            sink.write(
                [sink.prepare(Batch("orders", partition, offsets[0], last + 1, records, rows))]
            )
            self.txns[f"{GROUP}/orders/{partition}"] = last
        text = (self.log / f"{INTERVAL:020d}.json").read_text()
        self.commit_template = [json.loads(line) for line in text.splitlines() if line]
        checkpoint = pq.read_table(self.log / f"{INTERVAL:020d}.checkpoint.parquet")
        self.schema = checkpoint.schema
        rows_read = checkpoint.to_pylist()
        non_file = [r for r in rows_read if r["protocol"] or r["metaData"]]
        self.non_file = pa.Table.from_pylist(non_file, schema=self.schema)
        adds = [r for r in rows_read if r["add"]]
        self.adds = pa.Table.from_pylist(adds, schema=self.schema)
        self.add_template = adds[-1]
        self.hint_template = json.loads((self.log / "_last_checkpoint").read_text())
        self.version = INTERVAL

    @staticmethod
    def offset(version: int) -> int:
        """The last offset of the batch that commit ``version`` wrote."""
        return (version // PARTITIONS + 1) * ROWS - 1

    def extend(self, to: int) -> None:
        """Commits up to version ``to``, a checkpoint every ``INTERVAL``, the hint at the last."""
        now = int(time.time() * 1000)
        adds: list[dict[str, Any]] = []
        for version in range(self.version + 1, to + 1):
            app, offset = f"{GROUP}/orders/{version % PARTITIONS}", self.offset(version)
            name = f"part-{version:05d}-bench.snappy.parquet"
            lines = []
            for action in copy.deepcopy(self.commit_template):
                if "commitInfo" in action:
                    action["commitInfo"]["timestamp"] = now
                    action["commitInfo"]["readVersion"] = version - 1
                if "txn" in action:
                    action["txn"].update(appId=app, version=offset, lastUpdated=now)
                if "add" in action:
                    action["add"].update(path=name, modificationTime=now)
                lines.append(json.dumps(action, separators=(",", ":")))
            (self.log / f"{version:020d}.json").write_text("\n".join(lines) + "\n")
            self.txns[app] = offset
            add = copy.deepcopy(self.add_template)
            add["add"].update(path=name, modificationTime=now)
            adds.append(add)
            if version % INTERVAL == 0 or version == to:
                new = pa.Table.from_pylist(adds, schema=self.schema)
                self.adds, adds = pa.concat_tables([self.adds, new]), []
            if version % INTERVAL == 0:
                self.checkpoint(version)
        self.version = to

    def checkpoint(self, version: int) -> None:
        txns = [{"txn": {"appId": a, "version": v, "lastUpdated": 0}} for a, v in self.txns.items()]
        txn_table = pa.Table.from_pylist(txns, schema=self.schema)
        table = pa.concat_tables([self.non_file, txn_table, self.adds])
        file = self.log / f"{version:020d}.checkpoint.parquet"
        pq.write_table(table, file)
        hint = dict(self.hint_template, version=version, size=table.num_rows)
        hint.update(sizeInBytes=file.stat().st_size, numOfAddFiles=self.adds.num_rows)
        hint.pop("checksum", None)
        (self.log / "._last_checkpoint.crc").unlink(missing_ok=True)
        (self.log / "_last_checkpoint").write_text(json.dumps(hint))

    def delta_agrees(self) -> bool:
        """Delta's own snapshot: the latest version, every file, and the transactions."""
        jvm: Any = self.spark._jvm
        jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
        snapshot = jvm.org.apache.spark.sql.delta.DeltaLog.forTableWithSnapshot(
            self.spark._jsparkSession, str(self.path)
        )._2()
        txns = dict(jvm.scala.jdk.javaapi.CollectionConverters.asJava(snapshot.transactions()))
        return (snapshot.version(), snapshot.numOfFiles(), txns) == (
            self.version,
            self.adds.num_rows,
            self.txns,
        )


def timed(call: Callable[[], object]) -> tuple[float, object]:
    started = time.perf_counter()
    result = call()
    return time.perf_counter() - started, result


def measure(
    table: Table, session: str, spark: SparkSession, sink: SparkSink, log: LogBuilder
) -> None:
    """Before (twice: nothing is kept), then after: a first read, one with nothing new, and
    one after ``INTERVAL`` more commits (and a checkpoint), as a rebalance after a while."""
    path, before = str(log.path), old_reader()
    apps = [f"{GROUP}/orders/{p}" for p in range(PARTITIONS)]
    whole = sum(1 for f in log.log.iterdir() if f.name.endswith((".json", ".parquet")))

    def expected() -> dict[tuple[str, int], int]:
        return {("orders", int(a.rsplit("/", 1)[1])): v + 1 for a, v in log.txns.items()}

    first = 0.0
    for read in ("first", "again"):
        seconds, found = timed(lambda: before.transaction_versions(spark, path, apps))
        assert found == log.txns, "the code before read other versions"
        first = first or seconds
        table.add(session, "before: every log file", read, seconds, whole, first / seconds)
    for read, new in (("first", 0), ("nothing new", 0), (f"{INTERVAL} new commits", INTERVAL)):
        log.extend(log.version + new)
        seconds, found = timed(lambda: sink.stored_offsets(WANTED))
        assert found == expected(), "stored_offsets read other versions"
        files = len(sink._txn_log.last_read.files) if sink._txn_log else 0
        table.add(session, "after: stored_offsets", read, seconds, files, first / seconds)


def run(ctx: Context) -> Table:
    commits = ctx.scale(10_000, 1_000)
    work = Path(tempfile.mkdtemp(prefix="kafleet-b7-"))
    spark = spark_infra.local_session("kafleet-bench")
    table = Table(
        "b7",
        f"exactly-once resume from a Delta table of {commits:,} commits, {PARTITIONS} partitions",
        ["session", "reader", "read", "seconds", "files read", "before first / this"],
    )
    server = None
    try:
        started = time.perf_counter()
        log = LogBuilder(spark, work / "table")
        log.extend(commits - 1)
        agrees = log.delta_agrees()
        table.notes.append(
            f"table built in {time.perf_counter() - started:.0f} s "
            f"(Delta's snapshot agrees with what was written: {agrees})"
        )
        local = SparkSink(SparkSettings(table=str(log.path), master="local[2]"), GROUP)
        measure(table, "local[2]", spark, local, log)
        server = spark_infra.start_connect(work / "connect")
        remote = SparkSink(SparkSettings(table=str(log.path), remote=server.url), GROUP)
        try:
            measure(table, "Spark Connect", remote.session(), remote, log)
        finally:
            remote.close()
    finally:
        if server is not None:
            server.stop()
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    table.notes.append(
        "files read: files whose contents were read (before: every JSON commit and checkpoint "
        "file in _delta_log); after, existence checks open no file"
    )
    table.notes.append(
        "Spark Connect cannot read _last_checkpoint (Spark skips files named _...): its first "
        "read lists the log's checkpoint names instead"
    )
    return table
