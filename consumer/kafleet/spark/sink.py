"""The Spark sink: handler results become rows, each batch a DataFrame given to a Spark job.

Owns: the Spark session (built by ``session.py``: ``local[*]`` with the jars, or a Spark Connect
client for ``spark.remote``; rebuilt after a failure, since a restarted server forgets
sessions); turning a handler's result into rows (a dict, a pydantic model, a dataclass, a
NamedTuple, or a list of them: one record may give several rows, or none); a batch as one
DataFrame (``arrow_batches.py`` makes it one Arrow table, then one ``createDataFrame``, never
row by row); calling the job as ``job(df, batch_info)``, like ``foreachBatch``; the default
job, an append to a Delta table with the Kafka coordinates as columns, many partitions' batches
in one commit; idempotent writes (``txnAppId`` = group/topic/partition, ``txnVersion`` = the
batch's last offset, and the batch's range replaced rather than appended), so a batch written
twice lands once, in a table that, created by them, is partitioned by topic and partition, so
that writers of different partitions never conflict: several partitions' batches in one commit
on an in-process session (``delta_commit.py``), one a commit through Spark Connect; and, for
exactly-once, where each partition's output ends (``stored_offsets``, read by ``delta_log.py``).

Does not own batching, retrying or committing (``shipping.py``, ``poller.py``).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import TYPE_CHECKING, Any, TypeAlias

from kafleet.config.imports import import_reference
from kafleet.config.spark import SparkSettings
from kafleet.engine.handlers import TableRows
from kafleet.engine.partition_state import TP
from kafleet.engine.record import Record
from kafleet.errors import SinkError
from kafleet.spark import delta_commit, delta_files, delta_log
from kafleet.spark.arrow_batches import COORDINATES, ArrowBatches, to_rows
from kafleet.spark.batcher import Batch, Row
from kafleet.spark.jobs import BatchInfo, Job, txn_app_id
from kafleet.spark.session import build_session, parse_schema

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)
PARTITIONED_BY = COORDINATES[:2]  # a new exactly-once table's (the default job): topic, partition
MAX_BATCHES_PER_COMMIT = 64
Prepared: TypeAlias = "tuple[pa.Table, BatchInfo] | None"


class SparkSink:
    """A ``BatchWriter`` (``shipping.py``) and an ``OffsetStore`` (``engine/rebalance.py``)."""

    def __init__(
        self,
        settings: SparkSettings,
        group_id: str,
        job: Job | None = None,
        idempotent: bool = True,
    ) -> None:
        self.settings = settings
        self.group_id = group_id
        self.idempotent = idempotent
        if job is None and settings.job:
            job = import_reference(settings.job, "spark.job")
        self.job: Job = job or self.append_to_delta
        self._session: SparkSession | None = None
        self._session_lock = threading.Lock()
        self._one_at_a_time = threading.Lock()
        self._created = threading.Event()
        self._new_table = False  # the next write creates the table (the default job)
        self.arrow = ArrowBatches(settings.coordinates)
        self._txn_log: delta_log.TransactionLog | None = None  # kept between assignments
        self._one_identifier_a_commit = False  # the session's Delta cannot take several
        self._transactions: delta_commit.DeltaTransactions | None = None
        self.where = settings.remote or settings.master

    # -- the session ------------------------------------------------------------------------

    def session(self) -> SparkSession:
        with self._session_lock:
            if self._session is None:
                self._session = build_session(self.settings, self.group_id)
                if self.settings.schema_ddl and self.arrow.declared is None:
                    self.arrow.declared = parse_schema(self.settings.schema_ddl)
            return self._session

    def _forget_session(self) -> None:
        """After a failed write to a Spark Connect server: connect afresh next time."""
        if self.settings.remote:
            with self._session_lock:
                self._session = None

    def close(self) -> None:
        with self._session_lock:
            session, self._session = self._session, None
        if session is not None and self.settings.remote:
            try:
                session.stop()
            except Exception as exc:  # noqa: BLE001 - the server may be gone already
                log.debug("closing the Spark Connect session: %s", exc)

    # -- results and batches (BatchWriter) ------------------------------------------------

    def rows(self, record: Record, result: Any) -> list[Row]:
        rows = to_rows(record, result)
        self.arrow.check_rows(record, rows)
        return rows

    def check_table(self, tp: TP, table: TableRows) -> None:
        self.arrow.check_table(tp, table)

    @property
    def max_batches_per_write(self) -> int:
        """The default job writes the batches of many partitions in one Delta commit (a
        commit costs about half a second of JVM CPU, whatever its size): an append, or, when
        writes are idempotent, one commit with each partition's identifier in it
        (``delta_commit.py``), which needs the session's JVM in this process. A custom job
        gets one partition's batch at a time, and so does an idempotent write through Spark
        Connect, whose DataFrame writer takes one ``txnAppId``."""
        if self.job != self.append_to_delta:
            return 1
        if self.idempotent and (self.settings.remote or self._one_identifier_a_commit):
            return 1
        return MAX_BATCHES_PER_COMMIT

    def prepare(self, batch: Batch) -> Prepared:
        """The batch as Arrow (None if its records gave no rows); ``ResultError`` names the
        record that does not fit."""
        table = self.arrow.convert(batch)
        if table is None:
            return None
        info = BatchInfo(
            self.group_id,
            batch.topic,
            batch.partition,
            batch.first_offset,
            batch.last_offset,
            len(batch),
            table.num_rows,
            self.settings.table,
            self.idempotent,
        )
        return table, info

    def write(self, prepared: list[Prepared]) -> None:
        """Run the job on one batch, or write several batches in one commit."""
        ready = [p for p in prepared if p is not None]
        if not ready:
            return
        session = self.session()
        try:
            if self._created.is_set() and not self.idempotent:
                self._run_job(session, ready)
            else:
                # Writers creating a new table at once conflict (Delta), so the first write
                # goes alone. So do idempotent ones: a replaceWhere conflicts with any
                # concurrent append to the partitions it reads, so side by side they only retry.
                with self._one_at_a_time:
                    if not self._created.is_set():
                        self._new_table = self._table_is_new(session)
                    if len(ready) > 1 and self.idempotent:
                        self._commit_together(session, ready)
                    else:
                        self._run_job(session, ready)
                self._created.set()
        except Exception:
            self._forget_session()
            raise

    def _commit_together(
        self, session: SparkSession, ready: list[tuple[pa.Table, BatchInfo]]
    ) -> None:
        """Idempotent batches of several partitions, each with its identifier, in one commit;
        one commit each where the session cannot (see ``max_batches_per_write``)."""
        try:
            if self._transactions is None or self._transactions.session is not session:
                self._transactions = delta_commit.DeltaTransactions(session)
            transactions = self._transactions
        except delta_commit.UnsupportedDeltaError as exc:
            log.warning("writing one partition's batch a commit: %s", exc)
            self._one_identifier_a_commit = True
            for table, info in ready:
                self.job(session.createDataFrame(table), info)
            return
        tables = {info.app_id: table for table, info in ready}
        batches = [info for _, info in ready]
        columns = set(ready[0][0].column_names)
        partition_by = PARTITIONED_BY if self._new_table and set(PARTITIONED_BY) <= columns else ()
        assert self.settings.table is not None
        written = transactions.commit(
            self.settings.table,
            batches,
            lambda fresh: session.createDataFrame(_concat([tables[b.app_id] for b in fresh])),
            partition_by,
        )
        if len(written) < len(batches):
            log.info(
                "%d of %d batches were in the table already",
                len(batches) - len(written),
                len(batches),
            )
        if self._new_table and written:
            self._new_table = False
            log.info("created %s with its first batches", self.settings.table)

    def _run_job(self, session: SparkSession, ready: list[tuple[pa.Table, BatchInfo]]) -> None:
        """The job on the batches as one DataFrame (several only for the default job's append)."""
        self.job(session.createDataFrame(_concat([t for t, _ in ready])), _merged(ready))

    def append_to_delta(self, df: DataFrame, info: BatchInfo) -> None:
        """The default job: an append to the Delta table at ``spark.table``.

        Idempotent writes replace the batch's own range of offsets (``replaceWhere``) rather
        than appending: a write that outlived its worker (a Spark Connect server finishes an
        operation whose client was killed) may have landed part of the range under another
        batch's ``txnVersion``, and a replace leaves each offset in the table once whatever
        overlapped. Delta's conflict checks make two writers of one range fail and retry.
        """
        assert info.table is not None
        writer = df.write.format("delta").options(**info.write_options)
        if self._new_table and info.idempotent and set(PARTITIONED_BY) <= set(df.columns):
            # A replaceWhere reads the partitions its predicate names, or the whole of an
            # unpartitioned table, and conflicts with any append to what it read (Delta's
            # ConcurrentAppendException): two workers of a group would keep failing each
            # other's writes. Partitioned by Kafka partition, each write reads only its own.
            writer = writer.partitionBy(*PARTITIONED_BY)
        if info.idempotent:
            writer = writer.mode("overwrite").option("replaceWhere", info.range_predicate)
        else:
            writer = writer.mode("append")
        writer.save(info.table)
        if self._new_table:
            self._new_table = False
            log.info("created %s with its first batch", info.table)

    def _table_is_new(self, session: SparkSession) -> bool:
        """Whether ``spark.table`` has no Delta log yet (the first write creates it). A log
        whose first commit was cleaned up keeps a checkpoint."""
        if self.settings.table is None:
            return False
        files = delta_files.for_session(session, f"{self.settings.table}/_delta_log")
        return not files.exist([delta_log.commit_name(0)]) and not files.checkpoint_names()

    # -- exactly-once (OffsetStore) -------------------------------------------------------

    def stored_offsets(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """For each partition, the offset after the last batch the table holds. The table's
        log is read from its last checkpoint the first time, then only its newer commits."""
        if not partitions or self.settings.table is None:
            return {}
        wanted = {txn_app_id(self.group_id, t, p): (t, p) for t, p in partitions}
        if self._txn_log is None:
            self._txn_log = delta_log.TransactionLog(self.settings.table, f"{self.group_id}/")
        try:
            versions = self._txn_log.versions(self.session(), wanted)
        except SinkError:
            raise
        except Exception:
            self._forget_session()
            raise
        return {wanted[app]: version + 1 for app, version in versions.items()}


def _concat(tables: list[pa.Table]) -> pa.Table:
    import pyarrow as pa

    return tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="permissive")


def _merged(ready: list[tuple[pa.Table, BatchInfo]]) -> BatchInfo:
    """What a job is told of several batches appended at once: the first's, with every record."""
    info = ready[0][1]
    if len(ready) == 1:
        return info
    return dataclasses.replace(info, records=sum(i.records for _, i in ready))
