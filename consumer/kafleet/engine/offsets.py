"""Which offsets may be committed: per partition, the lowest offset that is not yet done.

Owns: the bookkeeping of records from the moment the Poller hands them on until their handler
is done (or they are dead-lettered), for each assigned partition, as *ranges* of offsets: a
hand-over adds one range per partition, a finished run marks one range done, so the cost is
per run, not per record. Each added range starts where the previous one ended, so the offsets
a log compaction or a transaction marker left out are covered by the range that follows them
and never hold the commit back. Records complete out of order in ``key`` and ``unordered``
modes: the done ranges above the lowest unfinished offset are kept sorted and merged, and the
committable offset only passes a record once every record before it is done too, so a commit
never skips unfinished work. It never moves backwards (an attempt raises ``OffsetError``: a
bug), and a range marked done twice, or never added, raises too.

Thread-safe: the Poller adds ranges and reads what to commit; Executor threads mark them
done. Does not own committing (the Poller does) or deciding when (``commit_interval_ms``).

With a sink (``gated``), done is not enough: a record's results must also be written, so
what may be committed is capped by the end of the last batch written (``ship``), and until a
partition's first batch is written nothing of it is committed.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from dataclasses import dataclass, field

from kafleet.errors import OffsetError

TopicPartitionKey = tuple[str, int]


@dataclass
class PartitionOffsets:
    """One partition's records between hand-off and done, as offset ranges."""

    next_offset: int | None = None  # one past the last record added
    committed: int | None = None  # the highest offset the broker acknowledged
    sent: int | None = None  # the last offset handed to a commit
    shipped: int | None = None  # gated: the end of the last batch the sink wrote
    low: int | None = None  # the lowest offset added and not done (None: nothing added)
    in_progress: int = 0  # records added and not yet done
    # Done ranges above ``low``: sorted, disjoint, never touching (touching ones are merged).
    _starts: list[int] = field(default_factory=list)
    _ends: list[int] = field(default_factory=list)

    def add(self, first: int, last: int, count: int = 1) -> int:
        """``count`` records from ``first`` to ``last`` (inclusive) were handed over; returns
        where their range starts: ``first``, or one past the previous range if offsets were
        left out between them (the range covers the gap)."""
        if self.next_offset is not None and first < self.next_offset:
            raise OffsetError(
                f"offset {first} added after {self.next_offset - 1}: offsets must increase"
            )
        if last < first or count < 1:
            raise OffsetError(f"an empty or reversed range {first}..{last} was added")
        start = first if self.next_offset is None else self.next_offset
        if self.low is None or self.low == self.next_offset:  # all done so far
            self.low = start
        self.next_offset = last + 1
        self.in_progress += count
        return start

    def done(self, start: int, end: int, count: int = 1) -> None:
        """The range ``[start, end)`` (``count`` records) is done."""
        low, added_end = self.low, self.next_offset
        if low is None or added_end is None or start < low or end > added_end or end <= start:
            raise OffsetError(
                f"offsets {start}..{end - 1} marked done but they are not in progress "
                f"(in progress: {low}..{None if added_end is None else added_end - 1})"
            )
        starts, ends = self._starts, self._ends
        at = bisect_left(starts, start)
        if (at < len(starts) and starts[at] < end) or (at and ends[at - 1] > start):
            raise OffsetError(f"offsets {start}..{end - 1} marked done twice")
        self.in_progress -= count
        if start == low:  # in order (the usual case): the mark moves on, over done ranges
            if at < len(starts) and starts[at] == end:
                end = ends[at]
                del starts[at], ends[at]
            self.low = end
            return
        if at < len(starts) and starts[at] == end:  # joins the range after it
            starts[at] = start
            if at and ends[at - 1] == start:  # and the one before it
                starts[at] = starts[at - 1]
                del starts[at - 1], ends[at - 1]
        elif at and ends[at - 1] == start:  # joins the range before it
            ends[at - 1] = end
        else:
            starts.insert(at, start)
            ends.insert(at, end)

    def committable(self) -> int | None:
        """The offset to commit (the lowest not done), or None if nothing was ever added."""
        return self.low

    def commit_point(self, gated: bool) -> int | None:
        """What may be committed: the lowest offset not done, capped by what was shipped."""
        done = self.low
        if not gated or done is None or self.shipped is None:
            return None if gated else done
        return min(done, self.shipped)

    def truncate(self, offset: int) -> None:
        """Forget the records from ``offset`` on: they were added but never handed over (at
        most once, they were marked done at hand-over, their commit failed and the partition
        is going). A commit that failed may have been sent past them; what was acknowledged
        is what counts again."""
        if self.next_offset is not None and offset < self.next_offset:
            self.next_offset = offset
            at = bisect_left(self._ends, offset)  # the first done range ending at or after it
            if at < len(self._starts) and self._starts[at] < offset:
                self._ends[at] = offset
                at += 1
            del self._starts[at:], self._ends[at:]
            if self.low is not None and self.low > offset:
                self.low = offset
        self.sent = self.committed

    def mark_sent(self, offset: int) -> None:
        """A commit of ``offset`` is being sent: it must never be below an earlier one."""
        if self.sent is not None and offset < self.sent:
            raise OffsetError(f"commit of {offset} would move back from {self.sent}")
        self.sent = offset

    def mark_committed(self, offset: int) -> None:
        """The broker acknowledged ``offset``. Acknowledgements of asynchronous commits may
        arrive out of order (after a broker restart, say), so an older one changes nothing."""
        if self.committed is None or offset > self.committed:
            self.committed = offset


class OffsetTracker:
    """Every assigned partition's :class:`PartitionOffsets`, behind one lock."""

    def __init__(self, gated: bool = False) -> None:
        self.gated = gated  # a sink writes the results: commit only what it wrote
        self._lock = threading.Lock()
        self._partitions: dict[TopicPartitionKey, PartitionOffsets] = {}

    def assign(self, tp: TopicPartitionKey, committed: int | None = None) -> None:
        with self._lock:
            self._partitions[tp] = PartitionOffsets(committed=committed)

    def resume(self, tp: TopicPartitionKey, offset: int) -> None:
        """``tp`` starts at ``offset`` with everything below it done and written (exactly-once:
        the sink's output is ahead of the committed offset, its commit was lost), so
        ``offset`` may be committed before any record arrives: at a log end none will. Nothing
        happens to a partition that has records already."""
        with self._lock:
            partition = self._partitions.get(tp)
            if partition is not None and partition.next_offset is None:
                partition.next_offset = partition.low = partition.shipped = offset

    def remove(self, tp: TopicPartitionKey) -> None:
        """Forget a partition; completions that arrive for it later are ignored."""
        with self._lock:
            self._partitions.pop(tp, None)

    def add(self, tp: TopicPartitionKey, first: int, last: int, count: int = 1) -> int:
        """See :meth:`PartitionOffsets.add`: where the added range starts."""
        with self._lock:
            return self._partitions[tp].add(first, last, count)

    def add_many(self, ranges: list[tuple[TopicPartitionKey, int, int, int]]) -> list[int]:
        """``add`` for several (partition, first, last, count) under one lock."""
        with self._lock:
            return [
                self._partitions[tp].add(first, last, count) for tp, first, last, count in ranges
            ]

    def next_offsets(self, tps: set[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        """Per partition, one past the last offset added (partitions with none are left out)."""
        with self._lock:
            result = {}
            for tp in tps:
                partition = self._partitions.get(tp)
                if partition is not None and partition.next_offset is not None:
                    result[tp] = partition.next_offset
            return result

    def truncate(self, tp: TopicPartitionKey, offset: int) -> None:
        """See :meth:`PartitionOffsets.truncate`."""
        with self._lock:
            partition = self._partitions.get(tp)
            if partition is not None:
                partition.truncate(offset)

    def done(self, tp: TopicPartitionKey, start: int, end: int, count: int = 1) -> bool:
        """Mark a range done; False if its partition is no longer tracked (revoked or lost)."""
        with self._lock:
            partition = self._partitions.get(tp)
            if partition is None:
                return False
            partition.done(start, end, count)
            return True

    def done_many(self, ranges: list[tuple[TopicPartitionKey, int, int, int]]) -> None:
        """``done`` for several (partition, start, end, count) ranges under one lock."""
        with self._lock:
            for tp, start, end, count in ranges:
                partition = self._partitions.get(tp)
                if partition is not None:
                    partition.done(start, end, count)

    def handled(self, tp: TopicPartitionKey) -> int | None:
        """The lowest offset of ``tp`` not yet done (None: nothing added, or not assigned)."""
        with self._lock:
            partition = self._partitions.get(tp)
            return None if partition is None else partition.low

    def ship(self, tp: TopicPartitionKey, end: int) -> None:
        """The sink wrote ``tp``'s results below ``end``: they may be committed."""
        with self._lock:
            partition = self._partitions.get(tp)
            if partition is None:
                return
            if partition.shipped is not None and end < partition.shipped:
                raise OffsetError(f"{tp} shipped to {end} after {partition.shipped}")
            partition.shipped = end

    def to_commit(
        self, partitions: set[TopicPartitionKey] | None = None
    ) -> dict[TopicPartitionKey, int]:
        """Each partition's committable offset where it is ahead of what the broker
        acknowledged; they are noted as sent (a commit that failed is sent again later)."""
        with self._lock:
            chosen = (
                self._partitions
                if partitions is None
                else {tp: self._partitions[tp] for tp in partitions if tp in self._partitions}
            )
            result = {}
            for tp, part in chosen.items():
                offset = part.commit_point(self.gated)
                if offset is not None and (part.committed is None or offset > part.committed):
                    part.mark_sent(offset)
                    result[tp] = offset
            return result

    def committed(self, offsets: dict[TopicPartitionKey, int]) -> None:
        """Record that these offsets were committed (partitions since removed are ignored)."""
        with self._lock:
            for tp, offset in offsets.items():
                if tp in self._partitions:
                    self._partitions[tp].mark_committed(offset)

    def snapshot(self) -> dict[TopicPartitionKey, tuple[int | None, int | None, int]]:
        """Per partition: (committed, committable, records in progress)."""
        with self._lock:
            return {tp: (p.committed, p.low, p.in_progress) for tp, p in self._partitions.items()}
