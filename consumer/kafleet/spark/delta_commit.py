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
from typing import TYPE_CHECKING, Any

from kafleet.errors import KafleetError
from kafleet.spark.jobs import BatchInfo

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

DELTA = "org.apache.spark.sql.delta"
WRITE_COMMAND = f"{DELTA}.commands.WriteIntoDelta"
WRITE_OPERATION = f"{DELTA}.DeltaOperations$Write"
TRANSACTION = f"{DELTA}.OptimisticTransaction"
SEQ, MAP, OPTION = (
    "scala.collection.immutable.Seq",
    "scala.collection.immutable.Map",
    "scala.Option",
)
# Every method called on Delta's classes, with its parameter types, checked once a session: a
# Delta whose API differs is found before the first write (and its writes go one partition a
# commit), not by a write that fails on every retry.
METHODS = (
    (f"{DELTA}.DeltaLog", "startTransaction", (OPTION, OPTION)),
    (TRANSACTION, "txnVersion", ("java.lang.String",)),
    (TRANSACTION, "updateSetTransaction", ("java.lang.String", "long", OPTION)),
    (TRANSACTION, "commit", (SEQ, f"{DELTA}.DeltaOperations$Operation")),
    (
        WRITE_COMMAND,
        "writeAndReturnCommitData",
        (TRANSACTION, "org.apache.spark.sql.SparkSession", OPTION, "boolean"),
    ),
)
# WriteIntoDelta(deltaLog, mode, options, partitionColumns, configuration, data, ...) and
# DeltaOperations.Write(mode, partitionBy, predicate, ...): the leading parameters are given,
# the others take their Scala defaults (the companion's ``$lessinit$greater$default$N``).
COMMAND_LEADING = (
    f"{DELTA}.DeltaLog",
    "org.apache.spark.sql.SaveMode",
    f"{DELTA}.DeltaOptions",
    SEQ,
    MAP,
    "org.apache.spark.sql.Dataset",
)
OPERATION_LEADING = ("org.apache.spark.sql.SaveMode", OPTION, OPTION)


def combined_predicate(batches: Sequence[BatchInfo]) -> str:
    """The rows of every batch. Each range names its partition, so Delta's delete reads only
    those partitions' files, and a commit of other partitions meanwhile is no conflict."""
    return " OR ".join(f"({b.range_predicate})" for b in batches)


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
            for owner, method, types in METHODS:
                self._require(owner, method, types)
            self._command = Constructor(self, WRITE_COMMAND, COMMAND_LEADING)
            self._operation = Constructor(self, WRITE_OPERATION, OPERATION_LEADING)
            self._overwrite = jvm.org.apache.spark.sql.SaveMode.Overwrite
        except UnsupportedDeltaError:
            raise
        except Exception as exc:  # py4j: a class this Delta does not have
            raise UnsupportedDeltaError(
                f"Delta's transaction API is not as expected: {str(exc).splitlines()[0]}"
            ) from exc

    def commit(
        self,
        path: str,
        batches: Sequence[BatchInfo],
        data: Callable[[list[BatchInfo]], DataFrame],
        partition_by: Sequence[str] = (),
    ) -> list[BatchInfo]:
        """Write the rows of ``batches`` (``data`` gives them as one DataFrame) and each
        batch's identifier (``app_id``, its last offset the version) in one commit; the
        batches written. Those the table already holds (a retry
        after a lost answer, a batch a stale writer finished) are left out, in the same
        transaction that writes the others. Raises what Delta raises (a conflict is retried
        by the caller)."""
        jvm = self._jvm
        # Delta reads the session from the calling thread (SparkSession.active), as the
        # DataFrame writer sets it; a writer thread other than the one that built the session
        # has none (DELTA_SPARK_SESSION_NOT_SET).
        jvm.org.apache.spark.sql.SparkSession.setActiveSession(self._jsession)
        log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(self._jsession, path)
        txn = log.startTransaction(self._none, self._none)
        fresh = [b for b in batches if txn.txnVersion(b.app_id) < b.last_offset]
        if not fresh:
            return []
        now = jvm.scala.Option.apply(int(time.time() * 1000))
        for b in fresh:
            txn.updateSetTransaction(b.app_id, b.last_offset, now)
        predicate = combined_predicate(fresh)
        conf = self._jsession.sessionState().conf()
        options = jvm.org.apache.spark.sql.delta.DeltaOptions(
            self._utils.toScalaMap({"replaceWhere": predicate}), conf
        )
        partitions = self._utils.toSeq(list(partition_by))
        empty = self._utils.toScalaMap({})
        frame = data(fresh)._jdf
        command = self._command.new([log, self._overwrite, options, partitions, empty, frame])
        written = command.writeAndReturnCommitData(txn, self._jsession, self._none, False)
        some = jvm.scala.Option.apply
        operation = self._operation.new([self._overwrite, some(partitions), some(predicate)])
        txn.commit(written.actions(), operation)
        return fresh

    # -- Delta's classes ----------------------------------------------------------------------

    def _class(self, name: str) -> Any:
        loader = self._jvm.Thread.currentThread().getContextClassLoader()
        return self._jvm.java.lang.Class.forName(name, True, loader)

    def _require(self, owner: str, method: str, types: Sequence[str]) -> None:
        try:
            self._class(owner).getMethod(method, self._classes(types))
        except Exception as exc:  # py4j: Java's NoSuchMethodException
            raise UnsupportedDeltaError(f"{owner} has no {method}({', '.join(types)})") from exc

    def _classes(self, names: Sequence[str]) -> Any:
        primitive = {
            "long": self._jvm.java.lang.Long.TYPE,
            "boolean": self._jvm.java.lang.Boolean.TYPE,
        }
        found = self.array(self._jvm.java.lang.Class, len(names))
        for i, name in enumerate(names):
            found[i] = primitive.get(name) or self._class(name)
        return found

    def array(self, kind: Any, length: int) -> Any:
        gateway = self.session.sparkContext._gateway
        assert gateway is not None
        return gateway.new_array(kind, length)


class Constructor:
    """A Scala case class's constructor whose leading parameters are given and the others
    take their declared defaults."""

    def __init__(self, delta: DeltaTransactions, name: str, leading: Sequence[str]) -> None:
        self.delta = delta
        cls = delta._class(name)
        for constructor in cls.getConstructors():
            types = [t.getName() for t in constructor.getParameterTypes()]
            if tuple(types[: len(leading)]) == tuple(leading):
                break
        else:
            raise UnsupportedDeltaError(f"{name} has no constructor taking {', '.join(leading)}")
        self.constructor, self.count = constructor, len(types)
        companion = delta._class(name + "$")
        module = companion.getField("MODULE$").get(None)
        nothing = delta.array(delta._jvm.java.lang.Class, 0)
        no_args = delta.array(delta._jvm.java.lang.Object, 0)
        self.defaults = {
            i: companion.getMethod(f"$lessinit$greater$default${i + 1}", nothing).invoke(
                module, no_args
            )
            for i in range(len(leading), len(types))
        }

    def new(self, given: Sequence[Any]) -> Any:
        args = self.delta.array(self.delta._jvm.java.lang.Object, self.count)
        for i in range(self.count):
            args[i] = given[i] if i < len(given) else self.defaults[i]
        return self.constructor.newInstance(args)
