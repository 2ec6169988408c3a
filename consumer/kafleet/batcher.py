"""Cutting a partition's handler results into batches: which results, and when.

Owns: the results of one partition that wait for their batch, kept in offset order whatever
order their handlers finished in, and the rules that cut a batch. A batch is always a
contiguous range of the partition's offsets, ``[start, end)``, in which every record is done:
it takes results only below the *handled mark* (the offset tracker's lowest offset not yet
done), so batches of one partition never overlap and their last offsets only grow, which is
what Delta's idempotent writes (``txnVersion``) need. Records that gave no rows (``None``,
dead-lettered) are covered by the range without appearing in it.

A batch is cut when the ready results (those below the handled mark) reach ``max_records`` or
``max_bytes``, when the oldest waiting result has lingered ``linger_s``, or at once when the
caller says it is urgent (a revoke, a shutdown, a paused partition). When no result is ready
but the handled mark moved, an empty batch moves the range on without a write.

Pure bookkeeping with the time passed in: no threads, no I/O. Does not own writing, retrying
or committing (``shipping.py``).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass, field
from typing import Any

from kafleet.record import Record

Row = dict[str, Any]


@dataclass(frozen=True)
class BatchBounds:
    max_records: int = 5000
    max_bytes: int = 16 * 1024 * 1024
    linger_s: float = 1.0

    def __post_init__(self) -> None:
        if self.max_records < 1 or self.max_bytes < 1 or self.linger_s < 0:
            raise ValueError(f"batch bounds must be positive: {self}")


@dataclass
class Batch:
    """Results of one partition's offsets ``[start, end)``, in offset order."""

    topic: str
    partition: int
    start: int | None  # None: from wherever this assignment began
    end: int  # the offset after the range: what may be committed once it is written
    records: list[Record] = field(default_factory=list)
    rows: list[list[Row]] = field(default_factory=list)  # per record, the rows it gave
    size: int = 0

    @property
    def first_offset(self) -> int:
        return self.records[0].offset

    @property
    def last_offset(self) -> int:
        return self.records[-1].offset

    def __len__(self) -> int:
        return len(self.records)


@dataclass
class PartitionResults:
    """One partition's results waiting for their batch."""

    topic: str
    partition: int
    shipped_to: int | None = None  # where the next batch starts
    size: int = 0
    since: float | None = None  # when the oldest waiting result arrived
    _offsets: list[int] = field(default_factory=list)
    _entries: dict[int, tuple[Record, list[Row]]] = field(default_factory=dict)

    def add(self, record: Record, rows: list[Row], now: float) -> None:
        if record.offset in self._entries or (
            self.shipped_to is not None and record.offset < self.shipped_to
        ):
            raise ValueError(f"{record} was added twice or after its range was shipped")
        if self._offsets and record.offset < self._offsets[-1]:
            insort(self._offsets, record.offset)  # finished out of order (key, unordered)
        else:
            self._offsets.append(record.offset)
        self._entries[record.offset] = (record, rows)
        self.size += record.size
        if self.since is None:
            self.since = now

    def __len__(self) -> int:
        return len(self._offsets)

    def ready(self, handled: int | None) -> int:
        """How many waiting results lie below the handled mark."""
        return 0 if handled is None else bisect_left(self._offsets, handled)

    def cut(
        self, handled: int | None, bounds: BatchBounds, now: float, urgent: bool = False
    ) -> Batch | None:
        """The next batch, taken out of the waiting results, if one is due; else None."""
        if handled is None or (self.shipped_to is not None and handled <= self.shipped_to):
            return None
        ready = self.ready(handled)
        if ready == 0:  # nothing to write below the mark: move the range on
            return self._take(0, handled, now)
        lingered = self.since is not None and now - self.since >= bounds.linger_s
        full = ready >= bounds.max_records or self.size >= bounds.max_bytes
        if not (urgent or lingered or full):
            return None
        count, size = 0, 0
        while count < min(ready, bounds.max_records) and (count == 0 or size < bounds.max_bytes):
            size += self._entries[self._offsets[count]][0].size
            count += 1
        end = self._offsets[count] if count < ready else handled
        return self._take(count, end, now)

    def _take(self, count: int, end: int, now: float) -> Batch:
        batch = Batch(self.topic, self.partition, self.shipped_to, end)
        for offset in self._offsets[:count]:
            record, rows = self._entries.pop(offset)
            batch.records.append(record)
            batch.rows.append(rows)
            batch.size += record.size
        del self._offsets[:count]
        self.size -= batch.size
        self.shipped_to = end
        if count:  # the results left behind linger from now (a bound, not their arrival)
            self.since = now if self._offsets else None
        return batch
