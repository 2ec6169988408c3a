"""Which run goes next: the ordering lanes records join, and the fair line runs are taken from.

Owns, as bookkeeping on the partitions' queues (``partition_state.py``): the ordering rule as
lanes (``partition``: a lane per partition; ``key``: a lane per key; ``unordered``: a lane per
partition without the one-at-a-time limit); the line of partitions with a ready lane
(``ReadyLine``), served round-robin, each serving its ready lanes round-robin in turn, so a
partition with many live keys gets no more turns than one with a single key; taking a run
from the lane whose turn it is (counted in its partition by the run's length), and putting a
lane back in line when its run ends.

Not thread-safe: ``Dispatch`` (``dispatch.py``) calls it under the queues' lock and owns the
concurrency limit, the records in flight, and waiting and waking Executor threads; the
partitions' life cycle is ``WorkQueues``' (``work_queue.py``). No waiting, no I/O.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping

from kafleet.config.model import Ordering
from kafleet.engine.partition_state import TP, KeyLane, Lane, PartitionState
from kafleet.engine.runs import Chunk, Run, offset_of


class ReadyLine:
    """The partitions with a lane that may run, in the order they get their turns."""

    def __init__(self, ordering: Ordering) -> None:
        self.ordering = ordering
        # Each partition in line serves its lanes round-robin in turn, so a partition with a
        # thousand live keys gets one turn per round like a partition with one.
        self._parts: deque[PartitionState] = deque()

    def __bool__(self) -> bool:
        return bool(self._parts)

    def add(self, part: PartitionState, chunk: Chunk) -> int:
        """Queue a chunk of an open partition in its lanes; how many more runs may start now
        (the waiting threads worth waking)."""
        size = chunk.size
        added = 0
        if self.ordering == "key":
            added, size = self._add_by_key(part, chunk)
        else:
            lane = part.lanes.get(chunk.tp)
            if lane is None:
                limit = 1 if self.ordering == "partition" else 1 << 30
                lane = part.lanes[chunk.tp] = Lane(chunk.tp, limit)
            lane.chunks.append(chunk)
            lane.queued += len(chunk.messages)
            added += self.make_ready(part, lane)
            if self.ordering == "unordered":  # runs of it may start side by side
                added += len(chunk.messages) - 1
        part.queued += len(chunk.messages)
        part.queued_bytes += size
        return added

    def _add_by_key(self, part: PartitionState, chunk: Chunk) -> tuple[int, int]:
        """A lane per key: each record on its own, its range starting after the record
        before it, so the ranges of a partition still cover every offset. Returns how many
        lanes became ready, and the records' bytes (counted exactly, record by record)."""
        lanes = part.lanes
        start = chunk.start
        ready = size = 0
        for message in chunk.messages:
            key = message.key()
            lane = lanes.get(key)
            if lane is None:
                lane = lanes[key] = KeyLane(key, 1)
            length = len(message)
            lane.records.append((start, message, length))
            lane.queued += 1
            size += length
            start = offset_of(message) + 1
            if not lane.in_ready and not lane.in_flight:
                ready += self.make_ready(part, lane)
        return ready, size

    def make_ready(self, part: PartitionState, lane: Lane) -> bool:
        """Put a lane that may run in its partition's line, and the partition in the line of
        partitions (unless it is there already); whether the lane was not ready before."""
        if lane.in_ready or not lane.ready or part.closed:
            return False
        lane.in_ready = True
        part.ready.append(lane)
        if not part.in_ready:
            part.in_ready = True
            self._parts.append(part)
        return True

    def take(self, partitions: Mapping[TP, PartitionState], max_run: int) -> Run | None:
        """A run of up to ``max_run`` records from the next lane in turn, counted in its
        partition (None: no lane may run); partitions closed, or no longer in
        ``partitions``, leave the line."""
        while self._parts:
            part = self._parts.popleft()
            part.in_ready = False
            if part.closed or partitions.get(part.tp) is not part:
                part.ready.clear()
                continue
            lane = None
            lines = part.ready
            while lines:
                candidate = lines.popleft()
                candidate.in_ready = False
                if candidate.queued and candidate.in_flight < candidate.limit:
                    lane = candidate
                    break
            if lane is None:
                continue
            messages, ranges, size = lane.take(max_run)
            run = Run(part.tp, messages, ranges, size, time.monotonic(), part, lane)
            count = len(messages)
            part.running.add(run)
            part.queued_bytes -= size
            last = offset_of(messages[-1])
            if last > part.highest_taken:
                part.highest_taken = last
            part.queued -= count
            part.in_flight += count
            lane.in_flight += 1
            if lane.queued and lane.in_flight < lane.limit:  # more of it may run (unordered):
                self.make_ready(part, lane)  # the back of its partition's line
            if part.ready and not part.in_ready:  # other lanes wait: the partition's next turn
                part.in_ready = True
                self._parts.append(part)
            return run
        return None

    def retire(self, part: PartitionState, run: Run) -> None:
        """``run``, taken from ``part``, is over: its lane may run again (or, empty, go)."""
        part.running.discard(run)
        lane = run.lane
        assert isinstance(lane, Lane)
        lane.in_flight -= 1
        if lane.queued:
            self.make_ready(part, lane)
        elif not lane.in_flight and self.ordering == "key":
            part.lanes.pop(lane.key, None)  # keys come and go; do not keep empty lanes
