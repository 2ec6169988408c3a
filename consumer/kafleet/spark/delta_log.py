"""Reading a Delta table's transaction identifiers: where exactly-once output ends, per writer.

Owns: the latest ``txnVersion`` the table holds for each ``txnAppId`` asked for, read from as
little of the table's log as Delta's protocol (PROTOCOL.md) allows:

- ``_delta_log/_last_checkpoint``, the hint naming the newest checkpoint: its version, its
  parts, or a V2 checkpoint's top-level file;
- that checkpoint, which holds every ``txn`` up to its version: the classic file, every part
  of a multi-part one, or a V2 checkpoint's top-level file (JSON or Parquet). Its sidecars
  hold only add and remove actions ("V2 Spec"), so they are never read;
- the commits after it, ``<version>.json``, found by asking for the next versions by name
  until one does not exist (commits are numbered without gaps), not by listing a directory
  that holds a file per commit for the 30 days Delta keeps them.

The files' contents are read by Spark jobs (an in-process session or a Spark Connect server,
whose storage the worker may not see); ``delta_files.py`` says which files exist. A
``TransactionLog`` is kept per worker: it remembers the version it read up to and what it
found, so the next assignment reads only the commits after that version (or, when Delta has
checkpointed more than ``REPLAY_LIMIT`` commits later, that checkpoint). The latest ``txn`` of
an app id wins (Delta's action reconciliation; Delta skips a write whose version is not above
the last, so versions only grow). Delta's log cleanup deletes only what precedes the checkpoint
the hint names (``MetadataCleanup``), which holds it all. The log's checkpoint names are listed,
as Delta does, only when the hint cannot be used: missing (no checkpoint yet), unreadable (a
Spark Connect client cannot read it), older than a checkpoint already seen (a table written
anew), or naming a checkpoint or commit that is gone. Without a hint, a worker that has read
the log lists it again only when more than ``UNHINTED_REPLAY_LIMIT`` commits came since.

Does not own what the versions mean (``spark/sink.py``, ``poller.py``). Not read: commits that a
catalog has ratified but not yet published into ``_delta_log`` (catalog-managed tables). Kept:
identifiers Delta would let expire (``delta.setTransactionRetentionDuration``, off by default).
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kafleet.errors import SinkError
from kafleet.spark import delta_files

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)
TXN_SCHEMA = "txn struct<appId: string, version: bigint>"
REPLAY_LIMIT = 32  # commits read after the cached version rather than a newer checkpoint
UNHINTED_REPLAY_LIMIT = 1_000  # the same without a readable hint (a checkpoint: a listing)
WINDOW_LIMIT = 32  # versions asked for at once (Spark lists more paths than this with a job)
MULTI_PART = re.compile(r"(\d{20})\.checkpoint\.(\d{10})\.(\d{10})\.parquet")
SINGLE = re.compile(r"(\d{20})\.checkpoint(\.[^.]+)?\.(parquet|json)")


@dataclass(frozen=True)
class Checkpoint:
    version: int
    files: tuple[str, ...]  # names in _delta_log


def commit_name(version: int) -> str:
    return f"{version:020d}.json"


def hinted_checkpoint(version: int, parts: int | None, v2_file: str | None) -> Checkpoint:
    """The checkpoint ``_last_checkpoint`` names (``parts`` only for multi-part ones)."""
    if v2_file:
        return Checkpoint(version, (v2_file.rsplit("/", 1)[-1],))
    if parts:
        names = (
            f"{version:020d}.checkpoint.{i:010d}.{parts:010d}.parquet" for i in range(1, parts + 1)
        )
        return Checkpoint(version, tuple(names))
    return Checkpoint(version, (f"{version:020d}.checkpoint.parquet",))


def newest_complete_checkpoint(names: Iterable[str]) -> Checkpoint | None:
    """The newest checkpoint among a listing's file names; a multi-part one counts only with
    all its parts."""
    found: list[Checkpoint] = []
    parts: dict[tuple[int, int], set[str]] = {}
    for name in (n.rsplit("/", 1)[-1] for n in names):
        if match := MULTI_PART.fullmatch(name):
            parts.setdefault((int(match[1]), int(match[3])), set()).add(name)
        elif match := SINGLE.fullmatch(name):
            found.append(Checkpoint(int(match[1]), (name,)))
    for (version, count), present in parts.items():
        if len(present) == count:
            found.append(Checkpoint(version, tuple(sorted(present))))
    return max(found, key=lambda c: (c.version, len(c.files), c.files), default=None)


@dataclass
class LogRead:
    """What one read of the log looked at (for logs, tests and benchmarks)."""

    files: list[str] = field(default_factory=list)  # names whose contents were read
    probes: int = 0  # existence checks: Spark resolving paths, no file opened
    listed: bool = False  # the log directory was listed (the hint could not be trusted)


class TransactionLog:
    """One table's transaction identifiers as far as one worker has read them."""

    def __init__(self, table: str, app_prefix: str = "") -> None:
        self.table = table
        self.log_dir = table.rstrip("/") + "/_delta_log"
        self.app_prefix = app_prefix  # only these app ids are kept
        self.version = -1  # the table version `txns` is complete up to (-1: nothing read)
        self.checkpoint = -1  # the newest checkpoint version seen
        self.txns: dict[str, int] = {}
        self.last_read = LogRead()
        self._lock = threading.Lock()

    def versions(self, spark: SparkSession, app_ids: Iterable[str]) -> dict[str, int]:
        """The latest version of each app id the table holds (absent: none written)."""
        from pyspark.errors import AnalysisException

        with self._lock:
            files = delta_files.for_session(spark, self.log_dir)
            for attempt in (1, 2):
                try:
                    self._refresh(spark, files)
                    break
                except AnalysisException as exc:
                    if attempt == 1 and delta_files.missing(exc):
                        self.version = self.checkpoint = -1  # a file went (cleanup): afresh
                        continue
                    raise SinkError(self.table, f"cannot read its log: {exc}") from exc
            read = self.last_read
            log.debug(
                "%s: read %d log files up to version %d (%d existence checks%s)",
                self.table,
                len(read.files),
                self.version,
                read.probes,
                ", the log listed" if read.listed else "",
            )
            return {app: self.txns[app] for app in app_ids if app in self.txns}

    def _refresh(self, spark: SparkSession, files: delta_files.LogFiles) -> None:
        read = self.last_read = LogRead()
        hint = self._hint(files, read)
        if not self._replayed(spark, files, hint, read):
            self._read_from_checkpoint(spark, files, hint, read)

    def _replayed(
        self,
        spark: SparkSession,
        files: delta_files.LogFiles,
        hint: Checkpoint | None,
        read: LogRead,
    ) -> bool:
        """Read only the commits after the cached version, if the hint agrees with the cache
        and names no checkpoint far ahead of it (without a hint: if they are not too many)."""
        seen = hint.version if hint else -1
        if self.version < 0 or (
            files.reads_hint and not self.checkpoint <= seen <= self.version + REPLAY_LIMIT
        ):
            return False  # nothing cached, a replaced table, or a checkpoint far ahead
        limit = REPLAY_LIMIT if files.reads_hint else UNHINTED_REPLAY_LIMIT
        commits = self._commits_from(files, self.version, read, limit)  # ours still there?
        if not commits or len(commits) - 1 > limit or commits[-1] < seen:
            return False
        rows = self._read(spark, (), commits[1:], read)
        self._apply(rows, commits[-1], max(seen, self.checkpoint), fresh=False)
        return True

    def _read_from_checkpoint(
        self,
        spark: SparkSession,
        files: delta_files.LogFiles,
        hint: Checkpoint | None,
        read: LogRead,
    ) -> None:
        """Read the checkpoint the hint names and the commits after it; list the log for its
        newest checkpoint if the hint is missing or stale (its checkpoint or commit gone)."""
        base, commits = hint, list[int]()
        if base is not None and self._exist(files, base.files, read):
            commits = self._commits_from(files, base.version, read)
        if not commits:
            read.listed = True
            base = newest_complete_checkpoint(files.checkpoint_names())
            start = base.version if base else 0
            commits = self._commits_from(files, start, read)
            if base is not None and not commits:  # its own commit is gone: read on after it
                commits = [start, *self._commits_from(files, start + 1, read)]
        if not commits:
            self._apply([], -1, -1, fresh=True)  # no table, or no commit yet
            return
        after = [v for v in commits if base is None or v > base.version]
        rows = self._read(spark, base.files if base else (), after, read)
        self._apply(rows, commits[-1], base.version if base else -1, fresh=True)

    def _apply(
        self, rows: list[tuple[int, str, int]], version: int, checkpoint: int, fresh: bool
    ) -> None:
        txns = {} if fresh else self.txns
        for _, app, txn_version in sorted(rows):  # by file: a checkpoint, then commits in order
            txns[app] = txn_version
        self.txns, self.version, self.checkpoint = txns, version, checkpoint

    def _hint(self, files: delta_files.LogFiles, read: LogRead) -> Checkpoint | None:
        text = files.hint()
        if text is None:
            return None
        read.files.append("_last_checkpoint")
        try:
            info = json.loads(text)
            v2 = info.get("v2Checkpoint") or {}
            return hinted_checkpoint(int(info["version"]), info.get("parts"), v2.get("path"))
        except (ValueError, KeyError, TypeError, AttributeError):
            return None  # partly written (not atomic on every store): as if missing

    def _commits_from(
        self, files: delta_files.LogFiles, first: int, read: LogRead, most: int | None = None
    ) -> list[int]:
        """The commits ``first``, ``first + 1``, ... that exist, up to the first that does not
        (or, past ``most`` after ``first``, a few more): windows that double while every
        version in them exists, then a bisection."""
        end, width = first, 2  # every version below `end` exists
        while self._exist(files, map(commit_name, range(end, end + width)), read):
            end, width = end + width, min(2 * width, WINDOW_LIMIT)
            if most is not None and end - first - 1 > most:
                return list(range(first, end))
        high = end + width - 1  # the first missing version is at most this
        while end < high:
            middle = (end + high) // 2
            if self._exist(files, map(commit_name, range(end, middle + 1)), read):
                end = middle + 1
            else:
                high = middle
        return list(range(first, end))

    def _exist(self, files: delta_files.LogFiles, names: Iterable[str], read: LogRead) -> bool:
        read.probes += 1
        return files.exist(list(names))

    def _read(
        self, spark: SparkSession, checkpoint: tuple[str, ...], commits: list[int], read: LogRead
    ) -> list[tuple[int, str, int]]:
        """(file version, app id, txn version) of the kept app ids in the files named."""
        from pyspark.sql import functions as fn

        names = [*checkpoint, *map(commit_name, commits)]
        if not names:
            return []
        frames: list[DataFrame] = []
        for kind in ("json", "parquet"):
            paths = [f"{self.log_dir}/{n}" for n in names if n.endswith("." + kind)]
            if paths:
                frame = spark.read.schema(TXN_SCHEMA).format(kind).load(paths)
                frames.append(frame.select("txn.appId", "txn.version", "_metadata.file_name"))
        union = frames[0] if len(frames) == 1 else frames[0].unionByName(frames[1])
        found = union.where(fn.col("appId").startswith(self.app_prefix)).collect()
        read.files.extend(names)
        return [(int(r["file_name"][:20]), str(r["appId"]), int(r["version"])) for r in found]
