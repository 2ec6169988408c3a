"""Finding the files of a Delta table's log without reading them: whether files exist, the
``_last_checkpoint`` hint, and the names of the checkpoints.

Owns: the two ways of asking, chosen by the session. An in-process session (``local[*]``) asks
the Hadoop FileSystem that its JVM uses for the table's path, with the session's Hadoop
configuration, so every store Spark is set up for works (local, HDFS, S3A, ABFS...): an
existence check is one metadata call, and the hint is read as it is. A Spark Connect client has
no JVM of its own, and the server's storage may be out of its reach: it asks the server to
resolve paths (planning only: no job runs and no file is opened), and it cannot read the hint
at all, because Spark's file sources skip every file whose name starts with ``_``
(``_last_checkpoint`` among them), so it lists the checkpoints' names instead.

Does not own reading the actions inside log files (``delta_log.py``, through Spark jobs), nor
what the names mean.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)
CHECKPOINT_GLOB = "*.checkpoint.*"
NAME = re.compile(r"[^/\s,\[\]]+\.checkpoint\.[^/\s,\[\]]+")


class LogFiles(Protocol):
    reads_hint: bool  # whether `hint` can ever return the file's text

    def exist(self, names: Sequence[str]) -> bool:
        """Whether every file named (in ``_delta_log``) exists."""
        ...

    def hint(self) -> str | None:
        """The text of ``_delta_log/_last_checkpoint``; None if it does not exist or cannot
        be read (Delta then lists the log, and so do we)."""
        ...

    def checkpoint_names(self) -> list[str]:
        """The names of the checkpoint files in ``_delta_log`` (a listing); none if no log."""
        ...


def for_session(spark: SparkSession, log_dir: str) -> LogFiles:
    try:
        jsession = spark._jsparkSession
    except Exception:  # noqa: BLE001 - Spark Connect: no JVM on this side
        return ResolvedPaths(spark, log_dir)
    return HadoopFiles(spark, jsession, log_dir)


class HadoopFiles:
    """The session's own Hadoop FileSystem, through its JVM."""

    reads_hint = True

    def __init__(self, spark: SparkSession, jsession: Any, log_dir: str) -> None:
        self._jvm: Any = cast(Any, spark)._jvm
        self._gateway: Any = spark.sparkContext._gateway
        self._dir = self._jvm.org.apache.hadoop.fs.Path(log_dir)
        self._fs = self._dir.getFileSystem(jsession.sessionState().newHadoopConf())

    def _path(self, name: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(self._dir, name)

    def exist(self, names: Sequence[str]) -> bool:
        return all(self._fs.exists(self._path(name)) for name in names)

    def hint(self) -> str | None:
        try:
            stream = self._fs.open(self._path("_last_checkpoint"))
            try:
                return str(self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
            finally:
                stream.close()
        except Exception as exc:  # noqa: BLE001 - any failure: as if there were no hint
            if "java.io.FileNotFoundException" not in str(exc):
                log.warning("cannot read %s/_last_checkpoint, listing the log: %s", self._dir, exc)
            return None

    def checkpoint_names(self) -> list[str]:
        found = self._fs.globStatus(self._path(CHECKPOINT_GLOB))
        if found is None or len(found) == 0:
            return []
        # One string from the JVM, not one call per file: the log may hold many thousands.
        # (Py4J passes a Path[] where an Object is declared, not where an Object[] is.)
        paths = self._jvm.org.apache.hadoop.fs.FileUtil.stat2Paths(found)
        copy = self._gateway.new_array(self._jvm.java.lang.Object, len(paths))
        self._jvm.java.lang.System.arraycopy(paths, 0, copy, 0, len(paths))
        return NAME.findall(str(self._jvm.java.util.Arrays.toString(copy)))


class ResolvedPaths:
    """A Spark Connect server, asked to resolve paths (it checks that they exist)."""

    reads_hint = False

    def __init__(self, spark: SparkSession, log_dir: str) -> None:
        self._spark = spark
        self._dir = log_dir

    def exist(self, names: Sequence[str]) -> bool:
        paths = [f"{self._dir}/{name}" for name in names]
        try:
            # Two paths at least: Spark warns, with a stack trace, of one that does not exist.
            self._spark.read.format("text").load(paths * (2 if len(paths) == 1 else 1)).inputFiles()
        except Exception as exc:
            if missing(exc):
                return False
            raise
        return True

    def hint(self) -> str | None:
        return None  # Spark's file sources skip `_last_checkpoint`, as they skip every `_` file

    def checkpoint_names(self) -> list[str]:
        reader = self._spark.read.format("text").option("pathGlobFilter", CHECKPOINT_GLOB)
        try:
            files = reader.load(self._dir).inputFiles()
        except Exception as exc:
            if missing(exc):
                return []
            raise
        return [name.rsplit("/", 1)[-1] for name in files]


def missing(exc: Exception) -> bool:
    """Whether Spark failed because a path does not exist."""
    from pyspark.errors import AnalysisException

    return isinstance(exc, AnalysisException) and (
        "PATH_NOT_FOUND" in str(exc) or "does not exist" in str(exc)
    )
