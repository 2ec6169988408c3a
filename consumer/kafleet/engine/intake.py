"""The intake: records fetched from librdkafka and not yet handed to the work queues, and the
fair take of each poll (KIP-41).

Owns: splitting what ``consume()`` returned into each partition's slices (a slice at a time,
never a record at a time: the client returns a partition's fetched batch in one stretch);
per partition, those slices in the client's order (a hot partition's batch often comes
first); and handing over at most ``max_poll_records`` of them per poll in round-robin order
across partitions, each partition an equal share of what is left and never more than its
queue has room for, starting where the last poll stopped; so with ``max_poll_records`` below
what is fetched, no partition starves behind a hot one. Records of a partition that has no
room wait here; they count against its bounds, so it is paused like a full queue (librdkafka
fetches nothing more of it meanwhile). Also how far the Poller reads ahead of what it hands
over (``read_ahead``), and finding, in what a poll takes, where a partition's offsets went back
(a log truncation or an offset reset: ``trim_rewinds``, pure).

Not thread-safe: only the Poller uses it. Does not own the queues' bounds (``work_queue.py``)
or tracking offsets (``offsets.py``): a record is tracked from the moment it is handed over, so
what waits here is never committed and is fetched again after a revoke or a restart. Does not
own restarting the tracking of a partition whose offsets went back (``poller.py``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from itertools import groupby

from confluent_kafka import KafkaError, Message

from kafleet.engine.runs import offset_of

TP = tuple[str, int]
# How far the Poller reads ahead of what it hands over, for the fair take: a few polls' worth,
# and at least about one hot partition's fetched batch (256 KB of 100-byte records).
FAIR_DEPTH_POLLS = 4
MIN_FAIR_DEPTH = 2_000


def _topic_and_partition(message: Message) -> TP:
    return (message.topic() or "", message.partition() or 0)


def by_partition(
    messages: list[Message], topics: Collection[str]
) -> Iterator[tuple[TP, list[Message]]]:
    """Each stretch of one partition's messages, in the client's order. With one topic the
    partition number alone tells stretches apart (the cheap way, done in C)."""
    if len(topics) == 1:
        (topic,) = topics
        for partition, stretch in groupby(messages, Message.partition):
            group = list(stretch)
            if group[0].topic() == topic:  # a message of another topic is not assigned here
                yield (topic, partition or 0), group
    else:
        for tp, stretch in groupby(messages, _topic_and_partition):
            yield tp, list(stretch)


def assigned_stretches(
    messages: list[Message], assigned: Collection[TP], on_error: Callable[[KafkaError], None]
) -> list[tuple[TP, list[Message]]]:
    """What ``consume()`` returned, as each assigned partition's stretches of records;
    errors go to ``on_error`` and are left out."""
    if any(map(Message.error, messages)):
        kept = []
        for msg in messages:
            err = msg.error()
            if err is None:
                kept.append(msg)
            else:
                on_error(err)
        messages = kept
    return [
        (tp, stretch)
        for tp, stretch in by_partition(messages, {tp[0] for tp in assigned})
        if tp in assigned
    ]


class _Slice:
    """Some of a partition's records; ``pos`` of them were taken already."""

    __slots__ = ("messages", "pos", "size")

    def __init__(self, messages: list[Message], size: int) -> None:
        self.messages = messages
        self.pos = 0
        self.size = size  # bytes of the records not taken yet

    def take(self, count: int) -> tuple[list[Message], int]:
        """Up to ``count`` records and their bytes (a share, for part of a slice)."""
        pos, messages = self.pos, self.messages
        left = len(messages) - pos
        if count >= left:
            taken = messages if pos == 0 else messages[pos:]
            size, self.size = self.size, 0
            self.pos = len(messages)
            return taken, size
        size = self.size * count // left
        self.size -= size
        self.pos = pos + count
        return messages[pos : pos + count], size


class Intake:
    def __init__(self) -> None:
        self._staged: dict[TP, deque[_Slice]] = {}
        self._counts: dict[TP, int] = {}
        self._bytes: dict[TP, int] = {}
        self._turns: deque[TP] = deque()  # partitions with waiting records, next turn first

    def stage(self, stretches: Iterable[tuple[TP, list[Message]]]) -> None:
        """Keep a poll's records (by partition) until their turn. A stretch that starts at or
        below the last record waiting of its partition means the client's position went back
        (an offset reset, a log truncation): what waits of the old position is dropped, so
        that a chunk handed over never goes back inside itself (the Poller sees the jump
        between what it handed over before and the new records)."""
        for tp, messages in stretches:
            waiting = self._staged.get(tp)
            if waiting and offset_of(messages[0]) <= offset_of(waiting[-1].messages[-1]):
                self.drop([tp])
                waiting = None
            if waiting is None:
                waiting = self._staged[tp] = deque()
                self._counts[tp] = self._bytes[tp] = 0
                self._turns.append(tp)
            size = sum(map(len, messages))
            waiting.append(_Slice(messages, size))
            self._counts[tp] += len(messages)
            self._bytes[tp] += size

    def take(self, limit: int, rooms: Mapping[TP, int]) -> list[tuple[TP, list[Message], int]]:
        """Up to ``limit`` records as (partition, records, bytes), one entry per partition;
        the partitions served in turn from where the last take stopped: each an equal share
        of what is left, at most its room; served partitions go to the back of the line, so a
        share of one record still reaches every partition over successive polls."""
        left = {tp: rooms.get(tp, 0) for tp in self._turns}
        active = [tp for tp in self._turns if left[tp] > 0]
        taken: dict[TP, tuple[list[Message], int]] = {}
        while limit > 0 and active:
            share = max(1, limit // len(active))
            still = []
            for tp in active:
                count = min(share, self._counts[tp], left[tp], limit)
                messages, size = self._take_from(tp, count)
                before = taken.get(tp)
                if before is not None:
                    messages, size = before[0] + messages, before[1] + size
                taken[tp] = (messages, size)
                left[tp] -= count
                limit -= count
                if self._counts[tp] and left[tp] > 0:
                    still.append(tp)
                if limit == 0:
                    break
            active = still
        if taken:
            rest = [tp for tp in self._turns if tp not in taken]
            self._turns = deque(rest + list(taken))
        self._forget_empty()
        return [(tp, messages, size) for tp, (messages, size) in taken.items()]

    def _take_from(self, tp: TP, count: int) -> tuple[list[Message], int]:
        waiting = self._staged[tp]
        self._counts[tp] -= count
        head = waiting[0]
        messages, size = head.take(count)
        if head.pos == len(head.messages):
            waiting.popleft()
        count -= len(messages)
        while count:
            head = waiting[0]
            more, more_size = head.take(count)
            messages = messages + more
            size += more_size
            count -= len(more)
            if head.pos == len(head.messages):
                waiting.popleft()
        self._bytes[tp] -= size
        return messages, size

    def read_ahead(self, room: int, max_poll_records: int) -> int:
        """How many records the next ``consume()`` may bring (at least one): a few polls'
        worth ahead of what is handed over, within the ``room`` the unpaused queues have left,
        less what waits here."""
        depth = max(MIN_FAIR_DEPTH, FAIR_DEPTH_POLLS * max_poll_records)
        return max(1, min(room, depth) - len(self))

    def any_for(self, rooms: Mapping[TP, int]) -> bool:
        """Whether a partition with waiting records has room for some: the next take would
        hand something over (so the Poller must not wait for new records first)."""
        return any(rooms.get(tp, 0) > 0 for tp in self._staged)

    def drop(self, tps: Iterable[TP]) -> int:
        """Forget partitions' waiting records (revoked, lost or rewound); how many."""
        dropped = 0
        for tp in tps:
            if self._staged.pop(tp, None) is not None:
                dropped += self._counts.pop(tp)
                del self._bytes[tp]
        self._forget_empty()
        return dropped

    def counts(self) -> dict[TP, tuple[int, int]]:
        """Per partition with waiting records: (records, bytes)."""
        return {tp: (self._counts[tp], self._bytes[tp]) for tp in self._staged}

    def __len__(self) -> int:
        return sum(self._counts.values())

    def _forget_empty(self) -> None:
        for tp in [tp for tp, count in self._counts.items() if not count]:
            del self._staged[tp], self._counts[tp], self._bytes[tp]
        if len(self._turns) != len(self._staged):
            self._turns = deque(tp for tp in self._turns if tp in self._staged)


def trim_rewinds(
    taken: list[tuple[TP, list[Message], int]], expected: Mapping[TP, int]
) -> tuple[list[tuple[TP, list[Message], int]], dict[TP, int]]:
    """librdkafka moves a position back after a log truncation or an offset reset: what a
    poll took (``Intake.take``), each partition's records cut to where their offsets last went
    back, and for each such partition the offset its records start again at. Checked per
    stretch: its first offset against ``expected`` (the one after the last handed over), and
    within it, its ends and its length (offsets only grow, by one or more); a stretch that
    fails is looked at record by record."""
    jumps: dict[TP, int] = {}  # partition -> where its records start again
    result = []
    for tp, messages, size in taken:
        first, last = offset_of(messages[0]), offset_of(messages[-1])
        following = expected.get(tp)
        fine = (following is None or first >= following) and (last - first >= len(messages) - 1)
        if not fine:
            back = _last_step_back(messages, following)
            if back is not None:
                jumps[tp] = offset_of(messages[back])
                messages = messages[back:]
                size = sum(map(len, messages))
        result.append((tp, messages, size))
    return result, jumps


def _last_step_back(messages: list[Message], following: int | None) -> int | None:
    """The index from which a stretch's offsets run without going back (None: they never
    go back, and start at or after ``following``)."""
    offsets = [offset_of(message) for message in messages]
    back = None if following is None or offsets[0] >= following else 0
    for i in range(1, len(offsets)):
        if offsets[i] <= offsets[i - 1]:
            back = i
    return back
