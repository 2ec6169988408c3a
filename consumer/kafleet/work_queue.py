"""Per-partition bounded work queues, ordering lanes, and fair dispatch to the Executor.

Owns, under one lock: the records handed over by the Poller and not yet started, for every
assigned partition; reporting which partitions must be paused or resumed (the rule is
``partition_state.py``'s; only the Poller calls ``pause``/``resume``); the ordering rule as
lanes (``partition``: a lane per partition; ``key``: a lane per key; ``unordered``: a lane per
partition without the one-at-a-time limit); dispatch round-robin across partitions, then
across each partition's ready lanes, so a partition with many live keys gets no more turns
than one with a single key; the concurrency limit; stamping each record taken with its
assignment (a run that outlives a revoke never finishes a later run of the same offset, and is
kept apart for liveness); and waiting for a partition's in-flight records to end.

Results a sink has not written yet are *held* against their partition's bounds (``hold``,
``unhold``). The record bound is strict: the Poller hands a partition no more than
:meth:`WorkQueues.rooms` says; the byte bound may be passed by one poll's records. Does not own
running handlers (``executor.py``) or offsets (``offsets.py``).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping

from kafleet.config import Ordering, QueueBounds
from kafleet.partition_state import TP, Lane, LaneKey, PartitionState
from kafleet.record import Record


class WorkQueues:
    def __init__(self, bounds: QueueBounds, ordering: Ordering, concurrency: int) -> None:
        self.bounds = bounds
        self.ordering = ordering
        self._concurrency = concurrency
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # a record may be ready to take
        self._idle = threading.Condition(self._lock)  # in-flight records finished
        self._partitions: dict[TP, PartitionState] = {}
        # Partitions with a ready lane, served round-robin; each serves its lanes round-robin
        # in turn, so a partition with a thousand live keys gets one turn per round like a
        # partition with one.
        self._ready: deque[PartitionState] = deque()
        self._in_flight = 0  # records taken and not completed
        self._busy = 0  # runs taken and not released: what the concurrency limit counts
        self._closed = False
        # Records of forgotten partitions still in handlers: id(record) -> (start, record).
        self._abandoned: dict[int, tuple[float, Record]] = {}

    # -- the Poller's side -----------------------------------------------------------------

    def assign(self, tps: Iterable[TP]) -> None:
        with self._lock:
            for tp in tps:
                self._partitions.setdefault(tp, PartitionState(tp))

    def close_partitions(self, tps: Iterable[TP]) -> int:
        """Stop dispatching from these partitions and drop their queued records (revoke or
        lost). Return how many queued records were dropped. In-flight records run on."""
        dropped = 0
        with self._lock:
            for tp in tps:
                part = self._partitions.get(tp)
                if part is None:
                    continue
                part.closed = True
                dropped += part.queued
                part.queued = part.queued_bytes = 0
                for lane in part.lanes.values():
                    lane.records.clear()
        return dropped

    def never_started(self, tps: Iterable[TP]) -> dict[TP, tuple[int | None, int]]:
        """Per partition: the lowest offset queued and never started (None: none), and the
        highest offset ever taken (-1: none). At most once, a revoke rewinds the commit to
        the first of these that no started record lies above."""
        result: dict[TP, tuple[int | None, int]] = {}
        with self._lock:
            for tp in tps:
                part = self._partitions.get(tp)
                if part is None:
                    continue
                queued = [lane.records[0].offset for lane in part.lanes.values() if lane.records]
                result[tp] = (min(queued) if queued else None, part.highest_taken)
        return result

    def wait_idle(self, tps: Iterable[TP], timeout: float) -> bool:
        """Wait until no record of these partitions is in flight; False if time ran out."""
        tps = list(tps)
        deadline = time.monotonic() + timeout
        with self._lock:
            while any(self._partitions[tp].in_flight for tp in tps if tp in self._partitions):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._idle.wait(remaining)
        return True

    def remove(self, tps: Iterable[TP]) -> None:
        """Forget partitions. Their records still in handlers (a revoke that stopped waiting,
        or ``abandon``) are kept apart until they end: they hold threads, and a hung one must
        still make the worker unhealthy."""
        with self._lock:
            for tp in tps:
                part = self._partitions.pop(tp, None)
                if part is not None:
                    for started, record in part.started.values():
                        self._abandoned[id(record)] = (started, record)

    def push(self, records: Iterable[Record]) -> None:
        """Queue records handed over by the Poller (their partitions must be assigned)."""
        added = 0
        with self._lock:
            for record in records:
                part = self._partitions.get(record.tp)
                if part is None or part.closed:
                    continue
                lane = self._lane(part, record)
                lane.records.append(record)
                part.queued += 1
                part.queued_bytes += record.size
                self._make_ready(part, lane)
                added += 1
            if added:
                self._work.notify(added)

    def _lane(self, part: PartitionState, record: Record) -> Lane:
        if self.ordering == "key":
            key: LaneKey = (record.topic, record.partition, record.key)
        else:
            key = record.tp
        lane = part.lanes.get(key)
        if lane is None:
            limit = 1 if self.ordering != "unordered" else 1 << 30
            lane = part.lanes[key] = Lane(key, limit)
        return lane

    def rooms(self) -> dict[TP, int]:
        """Per open partition, how many more records its queue may take now (the strict
        record bound: a poll hands a partition no more than this)."""
        with self._lock:
            return {tp: p.room(self.bounds) for tp, p in self._partitions.items() if not p.closed}

    def transitions(
        self, headroom: int = 0, staged: Mapping[TP, tuple[int, int]] | None = None
    ) -> tuple[list[TP], list[TP]]:
        """Partitions to pause (a bound reached) and to resume (both under the low mark).

        ``headroom`` (the Poller passes what one poll may bring, up to half the bound) moves
        the high mark down: a queue is paused while it can still take a whole poll, so the
        fullest unpaused queue never shrinks every poll to a trickle. ``staged`` (records and
        bytes per partition fetched and not yet handed over: ``intake.py``) count too.
        """
        pause, resume = [], []
        staged = staged or {}
        now = time.monotonic()
        with self._lock:
            for tp, p in self._partitions.items():
                verdict = p.judge(self.bounds, headroom, staged.get(tp, (0, 0)), now)
                if verdict == "pause":
                    pause.append(tp)
                elif verdict == "resume":
                    resume.append(tp)
        return pause, resume

    # -- the Executor's side ---------------------------------------------------------------

    def take(self, timeout: float, max_run: int = 1) -> list[Record]:
        """The next run of records to handle one after another: up to ``max_run`` consecutive
        records of one lane, the lanes served round-robin. Empty after ``timeout``.

        Every run taken must be given back with :meth:`release` once handled; the concurrency
        limit counts runs. A run of an ordered lane keeps its order (the lane could not run
        them side by side anyway); the Executor asks for runs longer than 1 only when
        handlers are fast, so slow handlers still spread one record per thread.
        """
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                if self._closed:
                    return []
                if self._busy < self._concurrency:
                    run = self._take_locked(max_run)
                    if run:
                        return run
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return []
                self._work.wait(remaining)

    def _make_ready(self, part: PartitionState, lane: Lane) -> None:
        """Put a lane that may run in its partition's line, and the partition in the line of
        partitions (unless it is there already)."""
        if lane.in_ready or not lane.ready or part.closed:
            return
        lane.in_ready = True
        part.ready.append(lane)
        if not part.in_ready:
            part.in_ready = True
            self._ready.append(part)

    def _take_locked(self, max_run: int) -> list[Record]:
        while self._ready:
            part = self._ready.popleft()
            part.in_ready = False
            if part.closed or self._partitions.get(part.tp) is not part:
                part.ready.clear()
                continue
            lane = None
            while part.ready:
                candidate = part.ready.popleft()
                candidate.in_ready = False
                if candidate.ready:
                    lane = candidate
                    break
            if lane is None:
                continue
            now = time.monotonic()
            run = [lane.records.popleft() for _ in range(min(max_run, len(lane.records)))]
            for record in run:
                part.queued_bytes -= record.size
                part.started[record.offset] = (now, record)
            part.highest_taken = max(part.highest_taken, run[-1].offset)
            part.queued -= len(run)
            part.in_flight += len(run)
            lane.in_flight += len(run)
            self._in_flight += len(run)
            self._busy += 1
            self._make_ready(part, lane)  # more of this lane may run (unordered): back of its line
            if part.ready and not part.in_ready:  # other lanes wait: the partition's next turn
                part.in_ready = True
                self._ready.append(part)
            return run
        return []

    def release(self) -> None:
        """A run taken with :meth:`take` is over: its thread is free for another."""
        with self._lock:
            self._busy -= 1
            self._work.notify()

    def is_open(self, tp: TP) -> bool:
        """Whether records of ``tp`` may still run (not revoked, lost or stopped)."""
        part = self._partitions.get(tp)
        return part is not None and not part.closed

    def is_current(self, record: Record) -> bool:
        """Whether ``record`` was taken from its partition's current, open assignment (not one
        that was revoked, lost or stopped since, even if the partition came back)."""
        part = self._partitions.get(record.tp)
        return part is not None and not part.closed and self._owns(part, record)

    def owns(self, record: Record) -> bool:
        """Whether ``record`` is in flight in its partition's current assignment, open or
        being revoked: its result counts (a revoke writes what finishes while it waits)."""
        part = self._partitions.get(record.tp)
        return part is not None and self._owns(part, record)

    @staticmethod
    def _owns(part: PartitionState, record: Record) -> bool:
        entry = part.started.get(record.offset)
        return entry is not None and entry[1] is record

    def complete(self, record: Record, mark_done: Callable[[], object] | None = None) -> None:
        """A taken record is finished (done, dead-lettered, or abandoned).

        ``mark_done`` (the offset tracker's ``done``) runs under the lock, and only if the
        record still belongs to its partition's current assignment: a record that outlived a
        revoke (and maybe a new assignment of the same partition) is not counted twice.
        """
        self.complete_many([record], None if mark_done is None else lambda _: mark_done())

    def complete_many(
        self, records: list[Record], mark_done: Callable[[list[Record]], object] | None = None
    ) -> None:
        """:meth:`complete` for several records under one lock; ``mark_done`` gets those that
        still belong to their partition's current assignment."""
        if not records:
            return
        with self._lock:
            current = [r for r in records if self.owns(r)]
            if mark_done is not None and current:
                mark_done(current)
            if len(current) < len(records):
                for record in records:
                    self._abandoned.pop(id(record), None)
            self._in_flight -= len(records)
            for record in current:
                self._completed_locked(record)
            if self._closed and not self._in_flight:
                self._idle.notify_all()

    def _completed_locked(self, record: Record) -> None:
        part = self._partitions[record.tp]
        part.in_flight -= 1
        part.completed += 1
        del part.started[record.offset]
        key: LaneKey = (
            (record.topic, record.partition, record.key) if self.ordering == "key" else record.tp
        )
        lane = part.lanes.get(key)
        if lane is not None:
            lane.in_flight -= 1
            if lane.ready:
                self._make_ready(part, lane)
            elif not lane.records and not lane.in_flight and self.ordering == "key":
                del part.lanes[key]  # keys come and go; do not keep empty lanes
        if part.closed and not part.in_flight:
            self._idle.notify_all()

    def hold(self, tp: TP, records: int, size: int) -> None:
        """Results of ``tp`` wait for the sink: count them against its bounds."""
        self._adjust_held(tp, records, size)

    def unhold(self, tp: TP, records: int, size: int) -> None:
        """The sink wrote (or dropped) results of ``tp``: they no longer count."""
        self._adjust_held(tp, -records, -size)

    def _adjust_held(self, tp: TP, records: int, size: int) -> None:
        with self._lock:
            part = self._partitions.get(tp)
            if part is not None:
                part.held = max(0, part.held + records)
                part.held_bytes = max(0, part.held_bytes + size)

    def is_paused(self, tp: TP) -> bool:
        part = self._partitions.get(tp)
        return part is not None and part.paused

    def stop_partition(self, tp: TP, reason: str) -> None:
        """Stop dispatching a partition for good (its failure policy says stop)."""
        with self._lock:
            part = self._partitions.get(tp)
            if part is not None:
                part.stopped_reason = reason
                part.closed = True

    def set_concurrency(self, concurrency: int) -> None:
        with self._lock:
            self._concurrency = concurrency
            self._work.notify_all()

    @property
    def concurrency(self) -> int:
        return self._concurrency

    def close(self) -> None:
        """Wake every waiting Executor thread; ``take`` returns None from now on."""
        with self._lock:
            self._closed = True
            self._work.notify_all()
            self._idle.notify_all()

    def wait_all_idle(self, timeout: float) -> bool:
        """Wait until nothing is queued or in flight anywhere; False if time ran out."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._in_flight or any(
                p.queued for p in self._partitions.values() if not p.closed
            ):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._idle.wait(min(remaining, 0.05))
        return True

    # -- for the state snapshot ------------------------------------------------------------

    def snapshot(self) -> dict[TP, dict[str, object]]:
        now = time.monotonic()
        with self._lock:
            return {
                tp: {
                    "queued": p.queued,
                    "queued_bytes": p.queued_bytes,
                    "in_flight": p.in_flight,
                    "held": p.held,
                    "paused": p.paused,
                    "queue_bound": p.record_bound(self.bounds),
                    "stopped": p.stopped_reason,
                    "revoking": p.closed and p.stopped_reason is None,
                    "oldest_in_flight_s": (
                        now - min(t for t, _ in p.started.values()) if p.started else 0.0
                    ),
                }
                for tp, p in self._partitions.items()
            }

    def abandoned(self) -> tuple[int, float]:
        """Records of partitions no longer assigned still in their handlers: how many, and
        for how long the oldest has been (seconds; 0 if none)."""
        now = time.monotonic()
        with self._lock:
            starts = [started for started, _ in self._abandoned.values()]
        return len(starts), (now - min(starts) if starts else 0.0)

    @property
    def in_flight(self) -> int:
        return self._in_flight
