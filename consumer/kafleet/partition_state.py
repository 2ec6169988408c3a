"""One assigned partition's queue: its lanes, what it holds against its bounds, and whether it
must be paused or resumed.

Owns: the per-partition bookkeeping the work queues keep under their lock (``Lane``: records
of one ordering lane and how many of them run; ``PartitionState``: the lanes, the counts of
queued, held and in-flight records, the stamps of the records taken, the pause flag) and the
back-pressure rule as pure methods: the record bound (``queue.max_records``, or with
``queue.max_seconds`` what the partition handles in that many seconds at its measured rate),
the high mark (lowered by what one poll may bring) and the low mark (``queue.resume_at``).

Not thread-safe on its own: ``WorkQueues`` (``work_queue.py``) holds the lock, chooses what
runs next and owns the concurrency limit. No I/O.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from kafleet.config import QueueBounds
from kafleet.record import Record

TP = tuple[str, int]
LaneKey = tuple[str, int, bytes | None] | tuple[str, int]
MIN_RECORD_BOUND = 10  # queue.max_seconds never bounds a partition below this many records
RATE_WINDOW_S = 1.0  # queue.max_seconds: the window of one rate measurement


@dataclass(eq=False)
class Lane:
    key: LaneKey
    limit: int  # records of this lane that may run at once
    records: deque[Record] = field(default_factory=deque)
    in_flight: int = 0
    in_ready: bool = False

    @property
    def ready(self) -> bool:
        return bool(self.records) and self.in_flight < self.limit


@dataclass(eq=False)
class PartitionState:
    tp: TP
    queued: int = 0
    queued_bytes: int = 0
    in_flight: int = 0
    held: int = 0  # results done and waiting for the sink
    held_bytes: int = 0
    paused: bool = False
    closed: bool = False  # revoked, lost or stopped: nothing more is dispatched
    stopped_reason: str | None = None
    lanes: dict[LaneKey, Lane] = field(default_factory=dict)
    ready: deque[Lane] = field(default_factory=deque)  # lanes with a record that may run
    in_ready: bool = False  # in WorkQueues._ready
    highest_taken: int = -1  # the highest offset ever taken from this queue
    completed: int = 0  # records finished since rate_since (for queue.max_seconds)
    rate_since: float = field(default_factory=time.monotonic)
    rate: float | None = None  # records a second, measured (None: not yet)
    # In-flight offset -> (start time, the record taken). A completion counts only if it is
    # the very record taken from this assignment of the partition: after a revoke and a new
    # assignment the same offset may run again, and the old run must not finish the new one.
    started: dict[int, tuple[float, Record]] = field(default_factory=dict)

    def record_bound(self, bounds: QueueBounds) -> int:
        """``max_records``, or with ``max_seconds`` what the partition handles in that long at
        its measured rate (at least MIN_RECORD_BOUND)."""
        seconds = bounds.max_seconds
        if seconds is None or self.rate is None:
            return bounds.max_records
        wanted = max(MIN_RECORD_BOUND, math.ceil(self.rate * seconds))
        return min(bounds.max_records, wanted)

    def room(self, bounds: QueueBounds) -> int:
        """How many more records the queue may take now."""
        return max(0, self.record_bound(bounds) - self.queued - self.held)

    def judge(
        self, bounds: QueueBounds, headroom: int, waiting: tuple[int, int], now: float
    ) -> Literal["pause", "resume"] | None:
        """Whether to pause the partition (a bound reached, or stopped) or resume it (both
        under the low mark); ``waiting`` is (records, bytes) fetched and not handed over yet.
        Updates the pause flag."""
        if self.stopped_reason is not None and not self.paused:
            self.paused = True  # a stopped partition fetches nothing more
            return "pause"
        if self.closed:
            return None
        self._measure_rate(bounds, now)
        bound = self.record_bound(bounds)
        high_records = bound - min(headroom, bound // 2)
        records = self.queued + self.held + waiting[0]
        size = self.queued_bytes + self.held_bytes + waiting[1]
        if not self.paused and (records >= high_records or size >= bounds.max_bytes):
            self.paused = True
            return "pause"
        low_records = high_records * bounds.resume_at
        low_bytes = bounds.max_bytes * bounds.resume_at
        if self.paused and records <= low_records and size <= low_bytes:
            self.paused = False
            return "resume"
        return None

    def _measure_rate(self, bounds: QueueBounds, now: float) -> None:
        """With ``max_seconds``: the handling rate, a moving average over windows of
        RATE_WINDOW_S (counted while it had work; an idle partition keeps its rate)."""
        if bounds.max_seconds is None:
            return
        elapsed = now - self.rate_since
        if elapsed < RATE_WINDOW_S:
            return
        if self.completed or self.queued:
            sample = self.completed / elapsed
            self.rate = sample if self.rate is None else self.rate + (sample - self.rate) * 0.5
        self.completed, self.rate_since = 0, now
