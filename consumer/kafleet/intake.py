"""The intake: records fetched from librdkafka and not yet handed to the work queues, and the
fair take of each poll (KIP-41).

Owns: per partition, the records ``consume()`` returned in the client's order (a hot
partition's batch often comes first), and handing over at most ``max_poll_records`` of them per
poll in round-robin order across partitions, each partition an equal share of what is left
and never more than its queue has room for, starting where the last poll stopped; so with
``max_poll_records`` below what is fetched, no partition starves behind a hot one. Records of a
partition that has no room wait here; they count against its bounds, so it is paused like a
full queue (librdkafka fetches nothing more of it meanwhile).

Not thread-safe: only the Poller uses it. Does not own the queues' bounds (``work_queue.py``)
or tracking offsets (``offsets.py``): a record is tracked from the moment it is handed over, so
what waits here is never committed and is fetched again after a revoke or a restart.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping

from kafleet.record import Record

TP = tuple[str, int]


class Intake:
    def __init__(self) -> None:
        self._staged: dict[TP, deque[Record]] = {}
        self._bytes: dict[TP, int] = {}
        self._turns: deque[TP] = deque()  # partitions with waiting records, next turn first

    def stage(self, records: Iterable[Record]) -> None:
        """Keep a poll's records until their turn."""
        for record in records:
            tp = record.tp
            waiting = self._staged.get(tp)
            if waiting is None:
                waiting = self._staged[tp] = deque()
                self._bytes[tp] = 0
                self._turns.append(tp)
            waiting.append(record)
            self._bytes[tp] += record.size

    def take(self, limit: int, rooms: Mapping[TP, int]) -> list[Record]:
        """Up to ``limit`` records, the partitions served in turn from where the last take
        stopped: each an equal share of what is left, at most its room; served partitions go
        to the back of the line, so a share of one record still reaches every partition over
        successive polls."""
        left = {tp: rooms.get(tp, 0) for tp in self._turns}
        active = [tp for tp in self._turns if left[tp] > 0]
        taken: list[Record] = []
        served: list[TP] = []
        while limit > 0 and active:
            share = max(1, limit // len(active))
            still = []
            for tp in active:
                waiting = self._staged[tp]
                count = min(share, len(waiting), left[tp], limit)
                for _ in range(count):
                    record = waiting.popleft()
                    self._bytes[tp] -= record.size
                    taken.append(record)
                left[tp] -= count
                limit -= count
                if tp not in served:
                    served.append(tp)
                if waiting and left[tp] > 0:
                    still.append(tp)
                if limit == 0:
                    break
            active = still
        if served:
            first = set(served)
            rest = [tp for tp in self._turns if tp not in first]
            self._turns = deque(rest + served)
        self._forget_empty()
        return taken

    def any_for(self, rooms: Mapping[TP, int]) -> bool:
        """Whether a partition with waiting records has room for some: the next take would
        hand something over (so the Poller must not wait for new records first)."""
        return any(rooms.get(tp, 0) > 0 for tp in self._staged)

    def drop(self, tps: Iterable[TP]) -> int:
        """Forget partitions' waiting records (revoked, lost or rewound); how many."""
        dropped = 0
        for tp in tps:
            dropped += len(self._staged.pop(tp, ()))
            self._bytes.pop(tp, None)
        self._forget_empty()
        return dropped

    def counts(self) -> dict[TP, tuple[int, int]]:
        """Per partition with waiting records: (records, bytes)."""
        return {tp: (len(waiting), self._bytes[tp]) for tp, waiting in self._staged.items()}

    def __len__(self) -> int:
        return sum(len(waiting) for waiting in self._staged.values())

    def _forget_empty(self) -> None:
        for tp in [tp for tp, waiting in self._staged.items() if not waiting]:
            del self._staged[tp]
            del self._bytes[tp]
        if len(self._turns) != len(self._staged):
            self._turns = deque(tp for tp in self._turns if tp in self._staged)
