"""Which offsets may be committed: per partition, the lowest offset that is not yet done.

Owns: the bookkeeping of records from the moment the Poller hands them on until their handler
is done (or they are dead-lettered), for each assigned partition, and the invariant that the
committable offset never moves backwards (an attempt raises ``OffsetError``: a bug). Records
complete out of order in ``key`` and ``unordered`` modes; the committable offset only passes a
record once every record before it is done too, so a commit never skips unfinished work.

Thread-safe: the Poller adds records and reads what to commit; Executor threads mark records
done. Does not own committing (the Poller does) or deciding when (``commit_interval_ms``).

With a sink (``gated``), done is not enough: a record's results must also be written, so
what may be committed is capped by the end of the last batch written (``ship``), and until a
partition's first batch is written nothing of it is committed.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

from kafleet.errors import OffsetError

TopicPartitionKey = tuple[str, int]


@dataclass
class PartitionOffsets:
    """The records of one partition between hand-off and done, in offset order."""

    next_offset: int | None = None  # one past the last record added
    committed: int | None = None  # the highest offset the broker acknowledged
    sent: int | None = None  # the last offset handed to a commit
    shipped: int | None = None  # gated: the end of the last batch the sink wrote
    _pending: deque[int] = field(default_factory=deque)  # offsets added, in order, not popped
    _open: set[int] = field(default_factory=set)  # offsets added and not yet done

    def add(self, offset: int) -> None:
        if self.next_offset is not None and offset < self.next_offset:
            raise OffsetError(
                f"offset {offset} added after {self.next_offset - 1}: offsets must increase"
            )
        self._pending.append(offset)
        self._open.add(offset)
        self.next_offset = offset + 1

    def done(self, offset: int) -> None:
        if offset not in self._open:
            raise OffsetError(f"offset {offset} marked done but it is not in progress")
        self._open.remove(offset)
        while self._pending and self._pending[0] not in self._open:
            self._pending.popleft()

    @property
    def in_progress(self) -> int:
        """Records added and not yet done."""
        return len(self._open)

    def committable(self) -> int | None:
        """The offset to commit (the lowest not done), or None if nothing was ever added."""
        if self._pending:
            return self._pending[0]
        return self.next_offset

    def commit_point(self, gated: bool) -> int | None:
        """What may be committed: the lowest offset not done, capped by what was shipped."""
        done = self.committable()
        if not gated or done is None or self.shipped is None:
            return None if gated else done
        return min(done, self.shipped)

    def truncate(self, offset: int) -> None:
        """Forget the records from ``offset`` on: they were added but never handed over (at
        most once, their commit failed and the partition is going). A commit that failed may
        have been sent past them; what was acknowledged is what counts again."""
        self._pending = deque(o for o in self._pending if o < offset)
        self._open = {o for o in self._open if o < offset}
        if self.next_offset is not None and offset < self.next_offset:
            self.next_offset = offset
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

    def remove(self, tp: TopicPartitionKey) -> None:
        """Forget a partition; completions that arrive for it later are ignored."""
        with self._lock:
            self._partitions.pop(tp, None)

    def add(self, tp: TopicPartitionKey, offset: int) -> None:
        with self._lock:
            self._partitions[tp].add(offset)

    def add_many(self, records: list[tuple[TopicPartitionKey, int]]) -> None:
        """``add`` for a poll's worth of (partition, offset) pairs, under one lock."""
        with self._lock:
            for tp, offset in records:
                self._partitions[tp].add(offset)

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

    def done(self, tp: TopicPartitionKey, offset: int) -> bool:
        """Mark a record done; False if its partition is no longer tracked (revoked or lost)."""
        with self._lock:
            partition = self._partitions.get(tp)
            if partition is None:
                return False
            partition.done(offset)
            return True

    def done_many(self, records: list[tuple[TopicPartitionKey, int]]) -> None:
        """``done`` for several (partition, offset) pairs under one lock."""
        with self._lock:
            for tp, offset in records:
                partition = self._partitions.get(tp)
                if partition is not None:
                    partition.done(offset)

    def handled(self, tp: TopicPartitionKey) -> int | None:
        """The lowest offset of ``tp`` not yet done (None: nothing added, or not assigned)."""
        with self._lock:
            partition = self._partitions.get(tp)
            return None if partition is None else partition.committable()

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
            return {
                tp: (p.committed, p.committable(), p.in_progress)
                for tp, p in self._partitions.items()
            }
