"""Per-partition bounded work queues, ordering lanes, and fair dispatch to the Executor.

Owns: the records handed over by the Poller and not yet started, for every assigned partition;
the bounds (records and bytes) with their high and low marks, and reporting which partitions
must be paused or resumed (only the Poller calls ``pause``/``resume``); the ordering rule, as
lanes: a lane runs at most one record at a time (``partition``: a lane per partition; ``key``:
a lane per key; ``unordered``: a lane per partition without that limit); round-robin dispatch
across ready lanes so that no partition or key starves (KIP-41's fairness, applied where the
work is chosen); the concurrency limit; and waiting for a partition's in-flight records to end.

Thread-safe. Does not own running handlers (``executor.py``) or offsets (``offsets.py``).

Results a sink has not written yet are *held* against their partition's bounds (``hold``,
``unhold``), so a slow sink fills the queues and pauses partitions instead of growing memory.

The record bound is strict: the Poller asks :meth:`WorkQueues.poll_capacity` how many records
it may take in one poll, which is at most the room left in the fullest unpaused queue, so no
queue ever holds more than ``max_records``. The byte bound may be passed by one poll's records.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kafleet.config import Ordering, QueueBounds
from kafleet.record import Record

TP = tuple[str, int]
LaneKey = tuple[str, int, bytes | None] | tuple[str, int]


@dataclass(eq=False)
class _Lane:
    key: LaneKey
    limit: int  # records of this lane that may run at once
    records: deque[Record] = field(default_factory=deque)
    in_flight: int = 0
    in_ready: bool = False

    @property
    def ready(self) -> bool:
        return bool(self.records) and self.in_flight < self.limit


@dataclass(eq=False)
class _Partition:
    queued: int = 0
    queued_bytes: int = 0
    in_flight: int = 0
    held: int = 0  # results done and waiting for the sink
    held_bytes: int = 0
    paused: bool = False
    closed: bool = False  # revoked, lost or stopped: nothing more is dispatched
    stopped_reason: str | None = None
    lanes: dict[LaneKey, _Lane] = field(default_factory=dict)
    started: dict[int, float] = field(default_factory=dict)  # in-flight offset -> start time


class WorkQueues:
    def __init__(self, bounds: QueueBounds, ordering: Ordering, concurrency: int) -> None:
        self.bounds = bounds
        self.ordering = ordering
        self._concurrency = concurrency
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # a record may be ready to take
        self._idle = threading.Condition(self._lock)  # in-flight records finished
        self._partitions: dict[TP, _Partition] = {}
        self._ready: deque[_Lane] = deque()
        self._in_flight = 0  # records taken and not completed
        self._busy = 0  # runs taken and not released: what the concurrency limit counts
        self._closed = False

    # -- the Poller's side -----------------------------------------------------------------

    def assign(self, tps: Iterable[TP]) -> None:
        with self._lock:
            for tp in tps:
                self._partitions.setdefault(tp, _Partition())

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
        with self._lock:
            for tp in tps:
                self._partitions.pop(tp, None)

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
                if not lane.in_ready and lane.ready:
                    lane.in_ready = True
                    self._ready.append(lane)
                added += 1
            if added:
                self._work.notify(added)

    def _lane(self, part: _Partition, record: Record) -> _Lane:
        if self.ordering == "key":
            key: LaneKey = (record.topic, record.partition, record.key)
        else:
            key = record.tp
        lane = part.lanes.get(key)
        if lane is None:
            limit = 1 if self.ordering != "unordered" else 1 << 30
            lane = part.lanes[key] = _Lane(key, limit)
        return lane

    def poll_capacity(self, max_poll_records: int) -> int:
        """How many records the next poll may take without overfilling an unpaused queue."""
        with self._lock:
            room = [
                self.bounds.max_records - p.queued - p.held
                for p in self._partitions.values()
                if not p.paused and not p.closed
            ]
        return max(0, min([max_poll_records, *room]))

    def transitions(self, headroom: int = 0) -> tuple[list[TP], list[TP]]:
        """Partitions to pause (a bound reached) and to resume (both under the low mark).

        ``headroom`` (the Poller passes what one poll may bring, up to half the bound) moves
        the high mark down: a queue is paused while it can still take a whole poll, so the
        fullest unpaused queue never shrinks every poll to a trickle.
        """
        pause, resume = [], []
        high_records = self.bounds.max_records - min(headroom, self.bounds.max_records // 2)
        low_records = high_records * self.bounds.resume_at
        low_bytes = self.bounds.max_bytes * self.bounds.resume_at
        with self._lock:
            for tp, p in self._partitions.items():
                if p.stopped_reason is not None and not p.paused:
                    p.paused = True  # a stopped partition fetches nothing more
                    pause.append(tp)
                if p.closed:
                    continue
                records, size = p.queued + p.held, p.queued_bytes + p.held_bytes
                full = records >= high_records or size >= self.bounds.max_bytes
                if not p.paused and full:
                    p.paused = True
                    pause.append(tp)
                elif p.paused and records <= low_records and size <= low_bytes:
                    p.paused = False
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

    def _take_locked(self, max_run: int) -> list[Record]:
        while self._ready:
            lane = self._ready.popleft()
            lane.in_ready = False
            part = self._partitions.get(lane.key[:2])
            if part is None or part.closed or not lane.ready:
                continue
            now = time.monotonic()
            run = [lane.records.popleft() for _ in range(min(max_run, len(lane.records)))]
            for record in run:
                part.queued_bytes -= record.size
                part.started[record.offset] = now
            part.queued -= len(run)
            part.in_flight += len(run)
            lane.in_flight += len(run)
            self._in_flight += len(run)
            self._busy += 1
            if lane.ready:  # more of this lane may run (unordered): back of the line
                lane.in_ready = True
                self._ready.append(lane)
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
            current = [r for r in records if self._current(r)]
            if mark_done is not None and current:
                mark_done(current)
            self._in_flight -= len(records)
            for record in current:
                self._completed_locked(record)
            if self._closed and not self._in_flight:
                self._idle.notify_all()

    def _current(self, record: Record) -> bool:
        part = self._partitions.get(record.tp)
        return part is not None and record.offset in part.started

    def _completed_locked(self, record: Record) -> None:
        part = self._partitions[record.tp]
        part.in_flight -= 1
        del part.started[record.offset]
        key: LaneKey = (
            (record.topic, record.partition, record.key) if self.ordering == "key" else record.tp
        )
        lane = part.lanes.get(key)
        if lane is not None:
            lane.in_flight -= 1
            if lane.ready and not lane.in_ready and not part.closed:
                lane.in_ready = True
                self._ready.append(lane)
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
                    "stopped": p.stopped_reason,
                    "revoking": p.closed and p.stopped_reason is None,
                    "oldest_in_flight_s": now - min(p.started.values()) if p.started else 0.0,
                }
                for tp, p in self._partitions.items()
            }

    @property
    def in_flight(self) -> int:
        return self._in_flight
