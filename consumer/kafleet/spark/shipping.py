"""Shipping handler results to a sink in batches, committing only what the sink wrote.

Owns: the results waiting for their batch, per assigned partition (``batcher.py`` decides what
a batch is and when it is due); the writer threads, which write a partition's batches one at a
time and in order, different partitions side by side; retrying a failed write with backoff
for as long as the partition is assigned (a sink outage loses nothing and commits nothing
past what was written); telling the offset tracker where each written batch ends (its commit
point); holding waiting results against their partition's queue bounds, so a slow sink pauses
partitions instead of growing memory; draining revoked partitions; the sink's health.

A result that cannot be written (it does not fit the table: ``ResultError``) is not an
outage: its partition stops, with the record named, and the other partitions flow on.

Does not own what a batch becomes (the writer: ``spark/sink.py``), nor committing
(``poller.py``). Lock order: the shipper's lock, then the queues' or the offsets'.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from kafleet.engine.handlers import TableRows
from kafleet.engine.offsets import OffsetTracker
from kafleet.engine.partition_state import TP
from kafleet.engine.record import Record
from kafleet.engine.runs import Run
from kafleet.engine.work_queue import WorkQueues
from kafleet.errors import ResultError
from kafleet.health.state import Stats
from kafleet.spark.batcher import Batch, BatchBounds, PartitionResults, Row

log = logging.getLogger(__name__)
IDLE_WAIT_S = 0.02  # how often a writer looks for due batches when nothing woke it
RECENT_WRITES = 64  # the write times a revoke's wait for the sink is judged by


class BatchWriter(Protocol):
    """A sink: turns a handler result into rows (or checks a batch handler's table),
    prepares a batch (raising ``ResultError``
    for a record it cannot take), and writes one or more prepared batches in one go or
    raises (``max_batches_per_write`` says how many it takes at once)."""

    @property
    def max_batches_per_write(self) -> int: ...

    def rows(self, record: Record, result: Any) -> list[Row]: ...

    def check_table(self, tp: TP, table: TableRows) -> None: ...

    def prepare(self, batch: Batch) -> Any: ...

    def write(self, prepared: list[Any]) -> None: ...


@dataclass(frozen=True)
class Backoff:
    initial_s: float = 0.5
    max_s: float = 30.0

    def after(self, attempt: int) -> float:
        return float(min(self.max_s, self.initial_s * 2 ** min(attempt - 1, 30)))


class Shipper:
    def __init__(
        self,
        writer: BatchWriter,
        bounds: BatchBounds,
        offsets: OffsetTracker,
        queues: WorkQueues,
        stats: Stats,
        writers: int = 1,
        backoff: Backoff = Backoff(),
    ) -> None:
        self.writer = writer
        self.bounds = bounds
        self.offsets = offsets
        self.queues = queues
        self.stats = stats
        self.backoff = backoff
        self._paused_bounds = dataclasses.replace(
            bounds, max_records=max(1, bounds.max_records // 2)
        )
        self._cond = threading.Condition()
        self._parts: dict[TP, PartitionResults] = {}
        self._busy: set[TP] = set()
        self._urgent: set[TP] = set()
        self._closing = False  # shutting down: every ready result is urgent
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._work, name=f"kafleet-shipper-{i}", daemon=True)
            for i in range(writers)
        ]
        self._write_seconds: deque[float] = deque(maxlen=RECENT_WRITES)
        self.failing_since: float | None = None  # epoch seconds of the first failed attempt
        self.last_error: str | None = None

    # -- life cycle -------------------------------------------------------------------------

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def close_intake(self) -> None:
        """Shutting down: write whatever is ready now, lingering no more."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the writers; a write in progress ends its attempt, nothing more is retried."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    # -- partitions (the Poller's thread) -------------------------------------------------

    def assign(self, tps: Iterable[TP]) -> None:
        with self._cond:
            for tp in tps:
                self._parts[tp] = PartitionResults(*tp)
                self._urgent.discard(tp)

    def drain(self, tps: list[TP], timeout: float) -> bool:
        """Write the ready results of partitions being revoked; wait for their writes, up to
        ``timeout``. False if time ran out (their unwritten results are not committed)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._urgent.update(tps)
            self._cond.notify_all()
            while not all(self._settled(tp) for tp in tps):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    busy = [tp for tp in tps if tp in self._busy]
                    if busy:
                        log.warning("writes of %s still running after the drain deadline", busy)
                    return False
                self._cond.wait(min(remaining, IDLE_WAIT_S))
        return True

    def recent_write_p99(self) -> float | None:
        """The p99 of the last RECENT_WRITES successful writes' seconds (None before one)."""
        recent = sorted(self._write_seconds)
        return recent[int(len(recent) * 0.99)] if recent else None

    def remove(self, tps: Iterable[TP]) -> None:
        """Forget partitions (revoked or lost): their waiting results are dropped."""
        with self._cond:
            for tp in tps:
                self._parts.pop(tp, None)
                self._urgent.discard(tp)

    def settled(self) -> bool:
        """Nothing ready is left unwritten and no write is running (for shutdown)."""
        with self._cond:
            return all(self._settled(tp) for tp in self._parts)

    def _settled(self, tp: TP) -> bool:
        part = self._parts.get(tp)
        if part is None:
            return tp not in self._busy
        handled = self.offsets.handled(tp)
        moved = handled is not None and (part.shipped_to is None or handled > part.shipped_to)
        return tp not in self._busy and not moved

    # -- results (Executor threads) --------------------------------------------------------

    def add(self, run: Run, pairs: list[tuple[Record, Any]] | TableRows) -> None:
        """Take handlers' results for records of ``run`` (pairs, or a batch handler's table);
        they must come before the records are marked done. Raises ``ResultError`` if a result
        cannot become rows."""
        if isinstance(pairs, TableRows):
            self._add_table(run, pairs)
            return
        rows = [(record, self.writer.rows(record, result)) for record, result in pairs]
        with self._cond:
            if run.tp not in self._parts or not self.queues.owns(run):  # revoked and
                return  # forgotten, or a run that outlived its assignment: not committed either
            part = self._parts[run.tp]
            now = time.monotonic()
            held = size = 0
            for record, record_rows in rows:
                # A partition being revoked (closed, not yet forgotten) still takes the results
                # of its in-flight records: they are marked done next, and the drain writes them.
                try:
                    part.add(record, record_rows, now)
                except ValueError:  # the same offset again (a redelivery overlapping a revoke)
                    log.debug("dropped a second result for %s", record)
                    continue
                held += 1
                size += record.size
            if held:
                self.queues.hold(run.tp, held, size)

    def _add_table(self, run: Run, table: TableRows) -> None:
        self.writer.check_table(run.tp, table)
        with self._cond:
            if run.tp not in self._parts or not self.queues.owns(run):
                return
            held, size = self._parts[run.tp].add_table(table, time.monotonic())
            if held:
                self.queues.hold(run.tp, held, size)

    # -- the writers ----------------------------------------------------------------------

    def _work(self) -> None:
        while not self._stop.is_set():
            with self._cond:
                group = self._next_batches()
                if not group:
                    self._cond.wait(IDLE_WAIT_S)
                    continue
            written = self._write(group)
            with self._cond:
                for part, batch in group:
                    tp = (batch.topic, batch.partition)
                    self._busy.discard(tp)
                    if tp in written and self._parts.get(tp) is part:
                        self.offsets.ship(tp, batch.end)
                    self.queues.unhold(tp, len(batch), batch.size)
                self._cond.notify_all()

    def _next_batches(self) -> list[tuple[PartitionResults, Batch]]:
        """Due batches of partitions no writer holds, at most one per partition and as many
        as the writer takes at once; ranges that gave no rows are shipped on the spot.

        A write costs about the same whatever its size (a Delta commit), so once one batch
        is due, the other partitions' ready results ride along in the same write, due or not
        (when the writer takes several batches at once): fewer, larger commits."""
        now = time.monotonic()
        group: list[tuple[PartitionResults, Batch]] = []
        limit = max(1, self.writer.max_batches_per_write)
        for riding in (False, True):
            if riding and (not group or limit == 1):
                break
            for tp, part in list(self._parts.items()):
                if len(group) >= limit:
                    break
                if tp in self._busy:
                    continue
                urgent = riding or self._closing or tp in self._urgent
                # A paused partition waits for its results to be written: half a batch will do.
                bounds = self._paused_bounds if self.queues.is_paused(tp) else self.bounds
                batch = part.cut(self.offsets.handled(tp), bounds, now, urgent)
                while batch is not None and not batch:  # a range that gave no rows
                    self.offsets.ship(tp, batch.end)
                    self._cond.notify_all()
                    batch = part.cut(self.offsets.handled(tp), bounds, now, urgent)
                if batch is not None:
                    self._busy.add(tp)
                    self._parts[tp] = self._parts.pop(tp)  # round robin: the others come first
                    group.append((part, batch))
        return group

    def _write(self, group: list[tuple[PartitionResults, Batch]]) -> set[TP]:
        """Write until it succeeds; the partitions written (none if they all went away, or
        the shipper stopped). A batch the sink refuses stops its partition only."""
        prepared = []
        for part, batch in group:
            try:
                prepared.append((part, batch, self.writer.prepare(batch)))
            except ResultError as exc:  # the data, not the sink: retrying cannot help
                self._reject((batch.topic, batch.partition), exc)
        attempt = 0
        while prepared:
            attempt += 1
            started = time.monotonic()
            try:
                self.writer.write([p for _, _, p in prepared])
            except Exception as exc:  # noqa: BLE001 - any sink failure is retried
                self._failed([b for _, b, _ in prepared], attempt, exc)
            else:
                batches = [b for _, b, _ in prepared]
                self._succeeded(batches, time.monotonic() - started)
                return {(b.topic, b.partition) for b in batches}
            with self._cond:  # partitions revoked meanwhile are not written any more
                prepared = [
                    p for p in prepared if self._parts.get((p[1].topic, p[1].partition)) is p[0]
                ]
            if self._stop.wait(self.backoff.after(attempt)):
                break
        return set()

    def _succeeded(self, batches: list[Batch], seconds: float) -> None:
        rows = sum(b.row_count for b in batches)
        self.stats.observe_write(seconds, sum(len(b) for b in batches), rows)
        self._write_seconds.append(seconds)
        if self.failing_since is not None:
            log.info("the sink recovered: %s written", _describe(batches))
        self.failing_since = None
        self.last_error = None

    def _failed(self, batches: list[Batch], attempt: int, exc: Exception) -> None:
        self.stats.add(sink_write_failures=1)
        if self.failing_since is None:
            self.failing_since = time.time()
        first_line = _first_line(exc)
        self.last_error = f"{type(exc).__name__}: {first_line}"
        log.warning(
            "writing %s failed (attempt %d): %s; retrying in %.1f s",
            _describe(batches),
            attempt,
            self.last_error,
            self.backoff.after(attempt),
        )

    def _reject(self, tp: TP, exc: ResultError) -> None:
        reason = f"the sink cannot write {exc.record}: {exc.reason}"
        log.error("%s; stopping %s[%d]", reason, *tp)
        self.queues.stop_partition(tp, reason)

    # -- state ------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        with self._cond:
            waiting = sum(len(p) for p in self._parts.values())
            writing = len(self._busy)
        return {
            "waiting_results": waiting,
            "batches_writing": writing,
            "failing_since": self.failing_since,
            "last_error": self.last_error,
        }


def _describe(batches: list[Batch]) -> str:
    parts = [f"{b.topic}[{b.partition}]@{b.first_offset}..{b.last_offset}" for b in batches if b]
    shown = ", ".join(parts[:3]) + (f" and {len(parts) - 3} more" if len(parts) > 3 else "")
    return f"{shown} ({sum(len(b) for b in batches)} records)"


def _first_line(exc: Exception) -> str:
    """What went wrong, in one line. A Py4J error's own first line names only the JVM object
    called ("An error occurred while calling o225.txnVersion."): the Java exception says why."""
    java = getattr(exc, "java_exception", None)
    try:
        text = str(java) if java is not None else str(exc)
    except Exception:  # noqa: BLE001 - the JVM may be gone
        text = str(exc)
    return text.splitlines()[0] if text else ""
