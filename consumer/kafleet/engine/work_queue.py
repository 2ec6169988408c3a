"""Per-partition bounded work queues: the partitions' life cycle, under the queues' one lock.

Owns the one lock every count of the queues moves under, shared with ``Dispatch``
(``dispatch.py``: the Poller's chunks in, runs out, the concurrency limit), whose methods
``WorkQueues`` passes on, so the Poller, the Executor and the shipper hold one object. Owns,
under that lock: the assigned partitions' queues (``partition_state.py``), from ``assign``
through a revoke (``never_started``, ``close_partitions``, ``wait_idle``) or a stop to
``remove``; the runs of forgotten partitions still in handlers, kept apart for liveness
(``abandoned``); reporting which partitions must be paused or resumed (the rule is
``partition_state.py``'s; only the Poller calls ``pause``/``resume``); whether a run belongs
to its partition's current assignment; and the state snapshot.

Results a sink has not written yet are *held* against their partition's bounds (``hold``,
``unhold``). The record bound is strict: the Poller hands a partition no more than
:meth:`WorkQueues.rooms` says; the byte bound may be passed by one poll's records. Does not own
dispatch (``dispatch.py``), which lane runs next (``ready_line.py``), running handlers
(``executor.py``) or offsets (``offsets.py``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from kafleet.config.model import Ordering
from kafleet.config.queue_bounds import QueueBounds
from kafleet.engine.dispatch import Dispatch
from kafleet.engine.partition_state import TP, PartitionState
from kafleet.engine.runs import Chunk, Run


@dataclass
class Survey:
    pause: list[TP] = field(default_factory=list)
    resume: list[TP] = field(default_factory=list)
    rooms: dict[TP, int] = field(default_factory=dict)  # per open partition
    open_room: int = 0  # the rooms of the partitions not paused, together


class WorkQueues:
    def __init__(self, bounds: QueueBounds, ordering: Ordering, concurrency: int) -> None:
        self.bounds = bounds
        self.ordering = ordering
        self._lock = threading.Lock()
        self._partitions: dict[TP, PartitionState] = {}
        self._abandoned: set[Run] = set()  # runs of forgotten partitions still in handlers
        self._dispatch = Dispatch(
            self._lock, self._partitions, self._abandoned, ordering, concurrency
        )
        self._idle = self._dispatch.idle  # in-flight records finished

    # -- the Poller's side -----------------------------------------------------------------

    def assign(self, tps: Iterable[TP]) -> None:
        with self._lock:
            for tp in tps:
                self._partitions.setdefault(tp, PartitionState(tp))

    def close_partitions(self, tps: Iterable[TP]) -> int:
        """Stop dispatching from these partitions and drop their queued records (revoke or
        lost). Return how many queued records were dropped. In-flight records run on."""
        dropped = 0
        with self._lock:
            for tp in tps:
                part = self._partitions.get(tp)
                if part is None:
                    continue
                part.closed = True
                dropped += part.queued
                part.queued = part.queued_bytes = 0
                for lane in part.lanes.values():
                    lane.clear()
        return dropped

    def never_started(self, tps: Iterable[TP]) -> dict[TP, tuple[int | None, int]]:
        """Per partition: the lowest offset queued and never started (None: none), and the
        highest offset ever taken (-1: none). At most once, a revoke rewinds the commit to
        the first of these that no started record lies above."""
        result: dict[TP, tuple[int | None, int]] = {}
        with self._lock:
            for tp in tps:
                part = self._partitions.get(tp)
                if part is None:
                    continue
                queued = [lane.first_queued() for lane in part.lanes.values()]
                firsts = [offset for offset in queued if offset is not None]
                result[tp] = (min(firsts) if firsts else None, part.highest_taken)
        return result

    def wait_idle(self, tps: Iterable[TP], timeout: float) -> bool:
        """Wait until no record of these partitions is in flight; False if time ran out."""
        tps = list(tps)
        deadline = time.monotonic() + timeout
        with self._lock:
            while any(self._partitions[tp].in_flight for tp in tps if tp in self._partitions):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._idle.wait(remaining)
        return True

    def remove(self, tps: Iterable[TP]) -> None:
        """Forget partitions. Their records still in handlers (a revoke that stopped waiting,
        or ``abandon``) are kept apart until they end: they hold threads, and a hung one must
        still make the worker unhealthy."""
        with self._lock:
            for tp in tps:
                part = self._partitions.pop(tp, None)
                if part is not None:
                    self._abandoned.update(part.running)

    def rooms(self) -> dict[TP, int]:
        """Per open partition, how many more records its queue may take now (the strict
        record bound: a poll hands a partition no more than this)."""
        with self._lock:
            return {tp: p.room(self.bounds) for tp, p in self._partitions.items() if not p.closed}

    def transitions(
        self, headroom: int = 0, staged: Mapping[TP, tuple[int, int]] | None = None
    ) -> tuple[list[TP], list[TP]]:
        """Partitions to pause (a bound reached) and to resume (both under the low mark).

        ``headroom`` (the Poller passes what one poll may bring, up to half the bound) moves
        the high mark down: a queue is paused while it can still take a whole poll, so the
        fullest unpaused queue never shrinks every poll to a trickle. ``staged`` (records and
        bytes per partition fetched and not yet handed over: ``intake.py``) count too.
        """
        survey = self.survey(headroom, staged)
        return survey.pause, survey.resume

    def survey(
        self, headroom: int = 0, staged: Mapping[TP, tuple[int, int]] | None = None
    ) -> Survey:
        """What a poll needs, under one lock: :meth:`transitions`, :meth:`rooms`, and the
        room left in the partitions not paused."""
        survey = Survey()
        staged = staged or {}
        now = time.monotonic()
        bounds = self.bounds
        with self._lock:
            for tp, p in self._partitions.items():
                verdict = p.judge(bounds, headroom, staged.get(tp, (0, 0)), now)
                if verdict == "pause":
                    survey.pause.append(tp)
                elif verdict == "resume":
                    survey.resume.append(tp)
                if not p.closed:
                    room = survey.rooms[tp] = p.room(bounds)
                    if not p.paused:
                        survey.open_room += room
        return survey

    # -- the Executor's side ---------------------------------------------------------------

    def is_open(self, tp: TP) -> bool:
        """Whether records of ``tp`` may still run (not revoked, lost or stopped)."""
        part = self._partitions.get(tp)
        return part is not None and not part.closed

    def is_current(self, run: Run) -> bool:
        """Whether ``run`` was taken from its partition's current, open assignment (not one
        that was revoked, lost or stopped since, even if the partition came back)."""
        part = self._partitions.get(run.tp)
        return part is run.owner and part is not None and not part.closed and run.alive

    def owns(self, run: Run) -> bool:
        """Whether ``run`` is in flight in its partition's current assignment, open or being
        revoked: its results count (a revoke writes what finishes while it waits)."""
        return run.alive and self._partitions.get(run.tp) is run.owner

    def hold(self, tp: TP, records: int, size: int) -> None:
        """Results of ``tp`` wait for the sink: count them against its bounds."""
        self._adjust_held(tp, records, size)

    def unhold(self, tp: TP, records: int, size: int) -> None:
        """The sink wrote (or dropped) results of ``tp``: they no longer count."""
        self._adjust_held(tp, -records, -size)

    def _adjust_held(self, tp: TP, records: int, size: int) -> None:
        with self._lock:
            part = self._partitions.get(tp)
            if part is not None:
                part.held = max(0, part.held + records)
                part.held_bytes = max(0, part.held_bytes + size)

    def is_paused(self, tp: TP) -> bool:
        part = self._partitions.get(tp)
        return part is not None and part.paused

    def stop_partition(self, tp: TP, reason: str) -> None:
        """Stop dispatching a partition for good (its failure policy says stop)."""
        with self._lock:
            part = self._partitions.get(tp)
            if part is not None:
                part.stopped_reason = reason
                part.closed = True

    def wait_all_idle(self, timeout: float) -> bool:
        """Wait until nothing is queued or in flight anywhere; False if time ran out."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._dispatch.in_flight or any(
                p.queued for p in self._partitions.values() if not p.closed
            ):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._idle.wait(min(remaining, 0.05))
        return True

    # -- for the state snapshot ------------------------------------------------------------

    def snapshot(self) -> dict[TP, dict[str, object]]:
        now = time.monotonic()
        with self._lock:
            return {
                tp: {
                    "queued": p.queued,
                    "queued_bytes": p.queued_bytes,
                    "in_flight": p.in_flight,
                    "held": p.held,
                    "paused": p.paused,
                    "queue_bound": p.record_bound(self.bounds),
                    "stopped": p.stopped_reason,
                    "revoking": p.closed and p.stopped_reason is None,
                    "oldest_in_flight_s": (
                        now - min(run.started for run in p.running) if p.running else 0.0
                    ),
                }
                for tp, p in self._partitions.items()
            }

    def abandoned(self) -> tuple[int, float]:
        """Records of partitions no longer assigned still in their handlers: how many, and
        for how long the oldest has been (seconds; 0 if none)."""
        now = time.monotonic()
        with self._lock:
            counts = [(run.started, len(run)) for run in self._abandoned]
        records = sum(count for _, count in counts)
        return records, (now - min(started for started, _ in counts) if counts else 0.0)

    # -- dispatch: ``Dispatch``'s (``dispatch.py``), passed on -----------------------------

    def push(self, chunks: Iterable[Chunk]) -> None:
        self._dispatch.push(chunks)

    def take(self, timeout: float, max_run: int = 1) -> Run | None:
        return self._dispatch.take(timeout, max_run)

    def take_more(self, runs: int, max_run: int = 1, ending: int = 0) -> list[Run]:
        return self._dispatch.take_more(runs, max_run, ending)

    def release(
        self,
        max_run: int = 0,
        finished: Run | None = None,
        count: int | None = None,
        mark_done: Callable[[Run], object] | None = None,
    ) -> Run | None:
        return self._dispatch.release(max_run, finished, count, mark_done)

    def finish(
        self,
        run: Run,
        count: int | None = None,
        mark_done: Callable[[Run], object] | None = None,
    ) -> None:
        self._dispatch.finish(run, count, mark_done)

    def finish_all(
        self,
        done: list[Run],
        back: list[Run],
        mark_done: Callable[[list[Run]], object] | None = None,
    ) -> None:
        self._dispatch.finish_all(done, back, mark_done)

    def set_concurrency(self, concurrency: int) -> None:
        self._dispatch.set_concurrency(concurrency)

    @property
    def concurrency(self) -> int:
        return self._dispatch.concurrency

    def close(self) -> None:
        self._dispatch.close()

    @property
    def in_flight(self) -> int:
        return self._dispatch.in_flight
