"""Per-partition bounded work queues, ordering lanes, and fair dispatch to the Executor.

Owns: the records handed over by the Poller and not yet started, for every assigned partition;
the bounds (records and bytes) with their high and low marks, and reporting which partitions
must be paused or resumed (only the Poller calls ``pause``/``resume``); the ordering rule, as
lanes: a lane runs at most one record at a time (``partition``: a lane per partition; ``key``:
a lane per key; ``unordered``: a lane per partition without that limit); round-robin dispatch
across ready lanes so that no partition or key starves (KIP-41's fairness, applied where the
work is chosen); the concurrency limit; and waiting for a partition's in-flight records to end.

Thread-safe. Does not own running handlers (``executor.py``) or offsets (``offsets.py``).

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
        self._in_flight = 0
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
                self.bounds.max_records - p.queued
                for p in self._partitions.values()
                if not p.paused and not p.closed
            ]
        return max(0, min([max_poll_records, *room]))

    def transitions(self) -> tuple[list[TP], list[TP]]:
        """Partitions to pause (a bound reached) and to resume (both under the low mark)."""
        pause, resume = [], []
        low_records = self.bounds.max_records * self.bounds.resume_at
        low_bytes = self.bounds.max_bytes * self.bounds.resume_at
        with self._lock:
            for tp, p in self._partitions.items():
                if p.stopped_reason is not None and not p.paused:
                    p.paused = True  # a stopped partition fetches nothing more
                    pause.append(tp)
                if p.closed:
                    continue
                full = (
                    p.queued >= self.bounds.max_records or p.queued_bytes >= self.bounds.max_bytes
                )
                if not p.paused and full:
                    p.paused = True
                    pause.append(tp)
                elif p.paused and p.queued <= low_records and p.queued_bytes <= low_bytes:
                    p.paused = False
                    resume.append(tp)
        return pause, resume

    # -- the Executor's side ---------------------------------------------------------------

    def take(self, timeout: float) -> Record | None:
        """The next record to run, round-robin over ready lanes; None after ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                if self._closed:
                    return None
                if self._in_flight < self._concurrency:
                    record = self._take_locked()
                    if record is not None:
                        return record
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._work.wait(remaining)

    def _take_locked(self) -> Record | None:
        while self._ready:
            lane = self._ready.popleft()
            lane.in_ready = False
            part = self._partitions.get(lane.key[:2])
            if part is None or part.closed or not lane.ready:
                continue
            record = lane.records.popleft()
            lane.in_flight += 1
            part.queued -= 1
            part.queued_bytes -= record.size
            part.in_flight += 1
            part.started[record.offset] = time.monotonic()
            self._in_flight += 1
            if lane.ready:  # more of this lane may run (unordered): back of the line
                lane.in_ready = True
                self._ready.append(lane)
            return record
        return None

    def complete(self, record: Record, mark_done: Callable[[], object] | None = None) -> None:
        """A taken record is finished (done, dead-lettered, or abandoned).

        ``mark_done`` (the offset tracker's ``done``) runs under the lock, and only if the
        record still belongs to its partition's current assignment: a record that outlived a
        revoke (and maybe a new assignment of the same partition) is not counted twice.
        """
        with self._lock:
            self._in_flight -= 1
            part = self._partitions.get(record.tp)
            if part is not None and record.offset not in part.started:
                part = None  # taken under an earlier assignment of this partition
            if part is not None:
                if mark_done is not None:
                    mark_done()
                part.in_flight -= 1
                part.started.pop(record.offset, None)
                key: LaneKey = (
                    (record.topic, record.partition, record.key)
                    if self.ordering == "key"
                    else record.tp
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
            if self._closed and not self._in_flight:
                self._idle.notify_all()
            self._work.notify()

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
