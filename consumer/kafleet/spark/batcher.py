"""Cutting a partition's handler results into batches: which results, and when.

Owns: the results of one partition that wait for their batch, kept in offset order whatever
order their handlers finished in, and the rules that cut a batch. A batch is always a
contiguous range of the partition's offsets, ``[start, end)``, in which every record is done:
it takes results only below the *handled mark* (the offset tracker's lowest offset not yet
done), so batches of one partition never overlap and their last offsets only grow, which is
what Delta's idempotent writes (``txnVersion``) need. Records that gave no rows (``None``,
dead-lettered) are covered by the range without appearing in it. A batch handler may give a
run's results as one Arrow table (a row per message): those rows wait as slices of it and
leave as slices, never as Python rows.

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

from kafleet.engine.handlers import TableRows
from kafleet.engine.record import Record
from kafleet.engine.runs import offset_of

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
    tables: list[TableRows] = field(default_factory=list)  # results given as Arrow tables
    size: int = 0

    @property
    def first_offset(self) -> int:
        # A table's messages are the list its handler got, which it may have reordered.
        firsts = [min(map(offset_of, t.messages)) for t in self.tables]
        return min([*firsts, self.records[0].offset] if self.records else firsts)

    @property
    def last_offset(self) -> int:
        lasts = [max(map(offset_of, t.messages)) for t in self.tables]
        return max([*lasts, self.records[-1].offset] if self.records else lasts)

    @property
    def row_count(self) -> int:
        return sum(len(r) for r in self.rows) + sum(len(t) for t in self.tables)

    def __len__(self) -> int:
        return len(self.records) + sum(len(t) for t in self.tables)

    def __bool__(self) -> bool:
        return bool(self.records or self.tables)


@dataclass
class PartitionResults:
    """One partition's results waiting for their batch."""

    topic: str
    partition: int
    shipped_to: int | None = None  # where the next batch starts
    size: int = 0
    since: float | None = None  # when the oldest waiting result arrived
    _offsets: list[int] = field(default_factory=list)
    # offset -> (its Record and rows, or a table and the row's index in it; its bytes)
    _entries: dict[int, tuple[Record | TableRows, Any, int]] = field(default_factory=dict)

    def add(self, record: Record, rows: list[Row], now: float) -> None:
        self._check(record.offset, record)
        self._place(record.offset, (record, rows, record.size), now)

    def add_table(self, table: TableRows, now: float) -> tuple[int, int]:
        """A run's results as one table; the offsets already waiting or shipped (a redelivery
        overlapping a revoke) are left out. How many rows, and bytes, were taken."""
        entries, shipped_to = self._entries, self.shipped_to
        taken = size = 0
        for index, message in enumerate(table.messages):
            offset = offset_of(message)
            if offset in entries or (shipped_to is not None and offset < shipped_to):
                continue
            length = len(message) + len(message.key() or b"")  # as ``Record.size``
            self._place(offset, (table, index, length), now)
            taken += 1
            size += length
        return taken, size

    def _check(self, offset: int, what: object) -> None:
        if offset in self._entries or (self.shipped_to is not None and offset < self.shipped_to):
            raise ValueError(f"{what} was added twice or after its range was shipped")

    def _place(self, offset: int, entry: tuple[Record | TableRows, Any, int], now: float) -> None:
        if self._offsets and offset < self._offsets[-1]:
            insort(self._offsets, offset)  # finished out of order (key, unordered)
        else:
            self._offsets.append(offset)
        self._entries[offset] = entry
        self.size += entry[2]
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
            size += self._entries[self._offsets[count]][2]
            count += 1
        end = self._offsets[count] if count < ready else handled
        return self._take(count, end, now)

    def _take(self, count: int, end: int, now: float) -> Batch:
        batch = Batch(self.topic, self.partition, self.shipped_to, end)
        picked: dict[int, tuple[TableRows, list[int]]] = {}  # rows taken from each table
        for offset in self._offsets[:count]:
            item, rows, size = self._entries.pop(offset)
            if isinstance(item, TableRows):
                picked.setdefault(id(item), (item, []))[1].append(rows)
            else:
                batch.records.append(item)
                batch.rows.append(rows)
            batch.size += size
        for table, indices in picked.values():
            batch.tables.append(_rows_of(table, indices))
        del self._offsets[:count]
        self.size -= batch.size
        self.shipped_to = end
        if count:  # the results left behind linger from now (a bound, not their arrival)
            self.since = now if self._offsets else None
        return batch


def _rows_of(table: TableRows, indices: list[int]) -> TableRows:
    """The rows ``indices`` (ascending) of a table: the table itself, a slice, or a take."""
    if len(indices) == len(table):
        return table
    first, count = indices[0], len(indices)
    if indices[-1] - first + 1 == count:  # one stretch
        return TableRows(table.table.slice(first, count), table.messages[first : first + count])
    return TableRows(table.table.take(indices), [table.messages[i] for i in indices])
