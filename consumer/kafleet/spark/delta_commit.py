"""Many partitions' batches written exactly once in one Delta commit, each under its own
transaction identifier.

Owns: one commit that holds the rows of several Kafka partitions' batches and, for each
partition, its ``txn`` action (``appId`` = group/topic/partition, ``version`` = the batch's last
offset), on an in-process Spark session; skipping the batches the table already holds; the
predicate that replaces each batch's own range of offsets.

Why: Delta's DataFrame writer takes one ``txnAppId`` per write, so each partition's batch was a
commit of its own, and a commit costs about half a second of JVM CPU whatever its size. Delta's
protocol allows a ``txn`` action per application id in one commit ("Transaction
Identifiers"), and Delta's own ``OptimisticTransaction`` records several
(``updateSetTransaction``). The write is Delta's ``WriteIntoDelta`` command (schema checks,
partitioning, ``replaceWhere``'s delete of what overlaps), run inside that transaction, then
committed once as a WRITE. Reading each partition's ``txnVersion`` through the transaction
makes a concurrent commit of the same partition a conflict (``ConcurrentTransactionException``),
as the DataFrame writer's own check does, so a stale writer's commit fails.

These are Delta's Scala classes, reached through the session's JVM (py4j); they are looked up,
and their constructors checked, once per session (``DeltaTransactions``). A Spark Connect
client has no JVM: through it each batch stays a commit of its own (``sink.py``).

Does not own: which batches go together (``shipping.py``), the table's creation and layout
(``sink.py``), reading the identifiers back (``delta_log.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kafleet.errors import KafleetError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

WRITE_COMMAND = "org.apache.spark.sql.delta.commands.WriteIntoDelta"
WRITE_OPERATION = "org.apache.spark.sql.delta.DeltaOperations$Write"
# WriteIntoDelta(deltaLog, mode, options, partitionColumns, configuration, data, ...) and
# DeltaOperations.Write(mode, partitionBy, predicate, ...): the leading parameters given; the
# rest, Options and flags with defaults of None and false, are filled in as such.
COMMAND_LEADING = (
    "org.apache.spark.sql.delta.DeltaLog",
    "org.apache.spark.sql.SaveMode",
    "org.apache.spark.sql.delta.DeltaOptions",
    "scala.collection.immutable.Seq",
    "scala.collection.immutable.Map",
    "org.apache.spark.sql.Dataset",
)
OPERATION_LEADING = ("org.apache.spark.sql.SaveMode", "scala.Option", "scala.Option")


@dataclass(frozen=True)
class Slice:
    """One partition's batch in a commit: its identifier, version and offsets."""

    app_id: str
    topic: str
    partition: int
    first_offset: int
    last_offset: int


def quoted(topic: str) -> str:
    return "'" + topic.replace("\\", "\\\\").replace("'", "\\'") + "'"


def range_predicate(topic: str, partition: int, first: int, last: int) -> str:
    """A batch's rows in the table, by their Kafka coordinates."""
    return (
        f"kafka_topic = {quoted(topic)} AND kafka_partition = {partition} "
        f"AND kafka_offset BETWEEN {first} AND {last}"
    )


def combined_predicate(slices: Sequence[Slice]) -> str:
    """The rows of every slice. Each range names its partition, so Delta's delete reads only
    those partitions' files, and a commit of other partitions meanwhile is no conflict."""
    return " OR ".join(
        f"({range_predicate(s.topic, s.partition, s.first_offset, s.last_offset)})" for s in slices
    )


class UnsupportedDeltaError(KafleetError):
    """The session cannot write several identifiers in one commit (Spark Connect, or a Delta
    whose classes differ from those this module knows)."""


class DeltaTransactions:
    """Delta's transaction API on an in-process session's JVM."""

    def __init__(self, session: SparkSession) -> None:
        jvm = getattr(session, "_jvm", None)
        jsession = getattr(session, "_jsparkSession", None)
        if jvm is None or jsession is None:
            raise UnsupportedDeltaError("the session has no JVM in this process (Spark Connect)")
        self.session, self._jvm, self._jsession = session, jvm, jsession
        try:
            self._none = jvm.scala.Option.empty()
            self._utils = jvm.org.apache.spark.api.python.PythonUtils
            self._command = self._constructor(WRITE_COMMAND, COMMAND_LEADING)
            self._operation = self._constructor(WRITE_OPERATION, OPERATION_LEADING)
            self._overwrite = jvm.org.apache.spark.sql.SaveMode.Overwrite
        except UnsupportedDeltaError:
            raise
        except Exception as exc:  # py4j: a class or method this Delta does not have
            raise UnsupportedDeltaError(
                f"Delta's transaction API is not as expected: {exc}"
            ) from exc

    def commit(
        self,
        path: str,
        slices: Sequence[Slice],
        data: Callable[[list[Slice]], DataFrame],
        partition_by: Sequence[str] = (),
    ) -> list[Slice]:
        """Write the rows of ``slices`` (``data`` gives them as one DataFrame) and each slice's
        identifier in one commit; the slices written. Those the table already holds (a retry
        after a lost answer, a batch a stale writer finished) are left out, in the same
        transaction that writes the others. Raises what Delta raises (a conflict is retried
        by the caller)."""
        jvm = self._jvm
        log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(self._jsession, path)
        txn = log.startTransaction()
        fresh = [s for s in slices if txn.txnVersion(s.app_id) < s.last_offset]
        if not fresh:
            return []
        now = jvm.scala.Option.apply(int(time.time() * 1000))
        for s in fresh:
            txn.updateSetTransaction(s.app_id, s.last_offset, now)
        predicate = combined_predicate(fresh)
        conf = self._jsession.sessionState().conf()
        options = jvm.org.apache.spark.sql.delta.DeltaOptions(
            self._utils.toScalaMap({"replaceWhere": predicate}), conf
        )
        partitions = self._utils.toSeq(list(partition_by))
        empty = self._utils.toScalaMap({})
        frame = data(fresh)._jdf
        command = self._build(
            self._command, [log, self._overwrite, options, partitions, empty, frame]
        )
        written = command.writeAndReturnCommitData(txn, self._jsession, self._none, False)
        some = jvm.scala.Option.apply
        operation = self._build(
            self._operation, [self._overwrite, some(partitions), some(predicate)]
        )
        txn.commit(written.actions(), operation)
        return fresh

    # -- Delta's constructors ---------------------------------------------------------------

    def _constructor(self, name: str, leading: Sequence[str]) -> Any:
        loader = self._jvm.Thread.currentThread().getContextClassLoader()
        cls = self._jvm.java.lang.Class.forName(name, True, loader)
        for constructor in cls.getConstructors():
            types = [t.getName() for t in constructor.getParameterTypes()]
            rest = types[len(leading) :]
            if tuple(types[: len(leading)]) == leading and all(
                t in ("scala.Option", "boolean") for t in rest
            ):
                return constructor
        raise UnsupportedDeltaError(f"{name} has no constructor taking {', '.join(leading)}")

    def _build(self, constructor: Any, given: list[Any]) -> Any:
        types = [t.getName() for t in constructor.getParameterTypes()]
        gateway = self.session.sparkContext._gateway
        assert gateway is not None
        args = gateway.new_array(self._jvm.java.lang.Object, len(types))
        for i, kind in enumerate(types):
            args[i] = (
                given[i] if i < len(given) else self._none if kind == "scala.Option" else False
            )
        return constructor.newInstance(args)
