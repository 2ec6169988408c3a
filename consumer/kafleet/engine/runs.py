"""Chunks and runs: how records travel from the Poller to a handler, a slice at a time.

Owns: the ``Chunk`` (one partition's consecutive records handed over by one poll, with the
offset range they cover) and the ``Run`` (the records one handler call, or one thread's loop
of calls, takes from one ordering lane, with the offset ranges they cover and their bytes).
Everything downstream of ``consume()`` moves these, never single records: the queues count
a run by its length, the offset tracker marks its ranges done in one step, the stats time it
once. Records stay the client's ``Message`` objects; a ``Record`` is built only for a handler
that takes one record at a time (``record.py``).

A range ``[start, end)`` covers every offset of its records and the offsets left out just
before them (compaction, transaction markers), so that done ranges meet and the commit
passes the gaps. Pure data and slicing: no locks, no I/O. Does not own choosing runs
(``ready_line.py``) or the offsets' bookkeeping (``offsets.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import Message

TP = tuple[str, int]
# A message's offset. The client types it as optional (a message of an error has none);
# the messages that reach the queues are records, which always have one.
offset_of: Callable[[Message], int] = Message.offset  # type: ignore[assignment]
Range = tuple[int, int, int]  # start, end (exclusive), records


@dataclass(eq=False, slots=True)
class Chunk:
    """Records of one partition, in offset order, covering ``[start, last offset + 1)``."""

    tp: TP
    start: int
    messages: list[Message]
    size: int  # bytes of the values (len of each message)

    @property
    def end(self) -> int:
        return offset_of(self.messages[-1]) + 1


@dataclass(eq=False, slots=True)
class Run:
    """Consecutive records of one ordering lane, handled one after another (or in one call)."""

    tp: TP
    messages: list[Message]
    ranges: list[Range]  # in offset order; one for a partition's lane, one or more by key
    size: int
    started: float = 0.0  # monotonic time it was taken
    owner: object = None  # the partition's state it was taken from (WorkQueues)
    lane: object = None  # the lane it was taken from
    alive: bool = True  # not finished or handed back yet

    def __len__(self) -> int:
        return len(self.messages)

    @property
    def last_offset(self) -> int:
        return offset_of(self.messages[-1])

    def split(self, count: int) -> Run:
        """Cut off the first ``count`` records as a run of their own (returned); this run
        keeps the rest, with the ranges and the share of bytes that go with them."""
        if not 0 < count < len(self.messages):
            raise ValueError(f"cannot split {count} of {len(self.messages)} records off a run")
        head_ranges: list[Range] = []
        left = count
        ranges = self.ranges
        i = 0
        while left:
            start, end, records = ranges[i]
            if records <= left:
                head_ranges.append(ranges[i])
                left -= records
                i += 1
                continue
            cut = offset_of(self.messages[count - 1]) + 1
            head_ranges.append((start, cut, left))
            ranges = [(cut, end, records - left), *ranges[i + 1 :]]
            i = 0
            left = 0
        tail_ranges = ranges[i:]
        head_size = self.size * count // len(self.messages)
        head = Run(
            self.tp,
            self.messages[:count],
            head_ranges,
            head_size,
            self.started,
            self.owner,
            self.lane,
            self.alive,
        )
        self.messages = self.messages[count:]
        self.ranges = tail_ranges
        self.size -= head_size
        return head
