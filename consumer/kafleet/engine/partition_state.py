"""One assigned partition's queue: its lanes, what it holds against its bounds, and whether it
must be paused or resumed.

Owns: the per-partition bookkeeping the work queues keep under their lock (``Lane``: chunks
of one ordering lane, taken as runs, and how many runs of it are in flight;
``PartitionState``: the lanes, the counts of queued, held and in-flight records, the runs
taken and not finished, the pause flag) and the
back-pressure rule as pure methods: the record bound (``queue.max_records``, or with
``queue.max_seconds`` what the partition handles in that many seconds at its measured rate),
the high mark (lowered by what one poll may bring) and the low mark (``queue.resume_at``).

Not thread-safe on its own: ``WorkQueues`` (``work_queue.py``) holds the lock, ``ReadyLine``
(``ready_line.py``) chooses what runs next and ``Dispatch`` (``dispatch.py``) owns the
concurrency limit. No I/O.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from confluent_kafka import Message

from kafleet.config.queue_bounds import QueueBounds
from kafleet.engine.runs import Chunk, Range, Run, offset_of

TP = tuple[str, int]
LaneKey = tuple[str, int] | bytes | None  # a partition's lane: its own; by key: the key
MIN_RECORD_BOUND = 10  # queue.max_seconds never bounds a partition below this many records
RATE_WINDOW_S = 1.0  # queue.max_seconds: the window of one rate measurement


@dataclass(eq=False)
class Lane:
    """Records of one ordering lane, as chunks (a partition's lane) or one-record chunks (a
    key's lane), and how many runs of it are in flight."""

    key: LaneKey
    limit: int  # runs of this lane that may be in flight at once
    chunks: deque[Chunk] = field(default_factory=deque)
    pos: int = 0  # records of the first chunk taken already
    records: deque[tuple[int, Message, int]] = field(default_factory=deque)  # a KeyLane's
    queued: int = 0
    in_flight: int = 0  # runs
    in_ready: bool = False

    @property
    def ready(self) -> bool:
        return self.queued > 0 and self.in_flight < self.limit

    def first_queued(self) -> int | None:
        """The offset of the first record not taken yet (None: none)."""
        if not self.queued:
            return None
        return offset_of(self.chunks[0].messages[self.pos])

    def take(self, max_run: int) -> tuple[list[Message], list[Range], int]:
        """Up to ``max_run`` records from the front: the records, their ranges, their bytes."""
        messages: list[Message] = []
        ranges: list[Range] = []
        size = 0
        chunks = self.chunks
        while max_run and chunks:
            chunk = chunks[0]
            pos, whole = self.pos, chunk.messages
            left = len(whole) - pos
            count = min(max_run, left)
            if count == left:
                part = whole if pos == 0 else whole[pos:]
                share = chunk.size
                chunks.popleft()
                self.pos = 0
            else:
                part = whole[pos : pos + count]
                share = chunk.size * count // left
                chunk.size -= share
                self.pos = pos + count
            start = chunk.start if pos == 0 else offset_of(whole[pos - 1]) + 1
            end = offset_of(part[-1]) + 1
            if ranges and ranges[-1][1] == start:
                ranges[-1] = (ranges[-1][0], end, ranges[-1][2] + count)
            else:
                ranges.append((start, end, count))
            messages = part if not messages else messages + part
            size += share
            max_run -= count
        self.queued -= len(messages)
        return messages, ranges, size

    def clear(self) -> None:
        self.chunks.clear()
        self.pos = self.queued = 0


@dataclass(eq=False)
class KeyLane(Lane):
    """A key's lane (``ordering: key``): its records one by one (``records``), each with where
    its range starts (after the partition's record before it) and its bytes."""

    def first_queued(self) -> int | None:
        return offset_of(self.records[0][1]) if self.records else None

    def take(self, max_run: int) -> tuple[list[Message], list[Range], int]:
        records = self.records
        if max_run == 1 or len(records) == 1:  # the usual case: one record of a live key
            start, message, size = records.popleft()
            self.queued -= 1
            return [message], [(start, offset_of(message) + 1, 1)], size
        messages: list[Message] = []
        ranges: list[Range] = []
        size = 0
        for _ in range(min(max_run, len(records))):
            start, message, length = records.popleft()
            end = offset_of(message) + 1
            if ranges and ranges[-1][1] == start:
                ranges[-1] = (ranges[-1][0], end, ranges[-1][2] + 1)
            else:
                ranges.append((start, end, 1))
            messages.append(message)
            size += length
        self.queued -= len(messages)
        return messages, ranges, size

    def clear(self) -> None:
        self.records.clear()
        self.queued = 0


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
    in_ready: bool = False  # in the ReadyLine
    highest_taken: int = -1  # the highest offset ever taken from this queue
    completed: int = 0  # records finished since rate_since (for queue.max_seconds)
    rate_since: float = field(default_factory=time.monotonic)
    rate: float | None = None  # records a second, measured (None: not yet)
    running: set[Run] = field(default_factory=set)  # runs taken and not finished

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
