"""Dispatch to the Executor: the Poller's chunks in, runs out, at most ``concurrency`` at once.

Owns, under the lock it shares with ``WorkQueues`` (``work_queue.py``, which passes its
methods on): queuing the chunks handed over by the Poller (``runs.py``) in their partitions'
lanes, waking no more waiting Executor threads than runs may start; taking runs in their
turns (``ready_line.py``) up to the concurrency limit (in runs), waiting for one; finishing
runs, whole or in part, every count moving by a run's length, and counted only in the
assignment they were taken from (a run that outlives a revoke never finishes a later run of
the same offsets); the records in flight; and waking whoever waits for them to end (``idle``).

Does not own the partitions: ``WorkQueues`` assigns, closes and forgets them (``Dispatch`` only
reads them, to skip closed or forgotten ones), judges their bounds, and keeps the runs of
forgotten partitions apart (``abandoned``: a run leaves it here when it ends). Nor which lane
runs next (``ready_line.py``), nor running handlers (``executor.py``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping

from kafleet.config.model import Ordering
from kafleet.engine.partition_state import TP, PartitionState
from kafleet.engine.ready_line import ReadyLine
from kafleet.engine.runs import Chunk, Run


class Dispatch:
    def __init__(
        self,
        lock: threading.Lock,
        partitions: Mapping[TP, PartitionState],
        abandoned: set[Run],
        ordering: Ordering,
        concurrency: int,
    ) -> None:
        self._lock = lock  # the queues' one lock, shared with WorkQueues
        self._partitions = partitions  # WorkQueues', read here only
        self._abandoned = abandoned  # WorkQueues': runs of forgotten partitions in handlers
        self._concurrency = concurrency
        self._work = threading.Condition(lock)  # a record may be ready to take
        self.idle = threading.Condition(lock)  # in-flight records finished
        self._line = ReadyLine(ordering)  # partitions with a lane that may run, in turn
        self._in_flight = 0  # records taken and not completed
        self._busy = 0  # runs taken and not released: what the concurrency limit counts
        self._waiting = 0  # Executor threads waiting in take()
        self._closed = False

    def push(self, chunks: Iterable[Chunk]) -> None:
        """Queue chunks handed over by the Poller (their partitions must be assigned); wake
        no more waiting Executor threads than lanes became ready to run."""
        added = 0
        with self._lock:
            for chunk in chunks:
                part = self._partitions.get(chunk.tp)
                if part is not None and not part.closed:
                    added += self._line.add(part, chunk)
            if added and self._waiting:
                self._work.notify(min(added, self._waiting))

    def take(self, timeout: float, max_run: int = 1) -> Run | None:
        """The next run of records to handle one after another (or in one call): up to
        ``max_run`` consecutive records of one lane, the lanes served round-robin. None after
        ``timeout``.

        Every run taken must be given back with :meth:`release` once handled; the concurrency
        limit counts runs. A run of an ordered lane keeps its order (the lane could not run
        them side by side anyway); the Executor asks for runs longer than 1 only when
        handlers are fast or take batches, so slow handlers still spread one record per thread.
        """
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                if self._closed:
                    return None
                if self._busy < self._concurrency:
                    run = self._take_locked(max_run)
                    if run is not None:
                        return run
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._waiting += 1
                try:
                    self._work.wait(remaining)
                finally:
                    self._waiting -= 1

    def take_more(self, runs: int, max_run: int = 1, ending: int = 0) -> list[Run]:
        """Up to ``runs`` more runs that may start now, under one lock, without waiting (the
        coroutine feeder starts them all in one hand-off to its event loop). ``ending`` runs
        taken before have ended and will be released soon (:meth:`finish_all`): their places
        count as free already, so a coroutine that ended one takes the next at once."""
        taken: list[Run] = []
        with self._lock:
            limit = self._concurrency + ending
            while len(taken) < runs and not self._closed and self._busy < limit:
                run = self._take_locked(max_run)
                if run is None:
                    break
                taken.append(run)
        return taken

    def _take_locked(self, max_run: int) -> Run | None:
        run = self._line.take(self._partitions, max_run)
        if run is not None:
            self._in_flight += len(run)
            self._busy += 1
        return run

    def release(
        self,
        max_run: int = 0,
        finished: Run | None = None,
        count: int | None = None,
        mark_done: Callable[[Run], object] | None = None,
    ) -> Run | None:
        """A run taken with :meth:`take` is over: its thread is free for another. In the same
        step, under one lock: the first ``count`` records of ``finished`` (all: None) are
        finished as :meth:`finish` does, and with ``max_run`` the thread takes its next run
        (up to ``max_run`` records), if one may start now, and no waiting thread is woken for
        it: a thread that just finished a run goes straight on to the next, no hand-over."""
        with self._lock:
            try:
                if finished is not None and finished.alive and (count is None or count > 0):
                    self._finish_locked(finished, count, mark_done)
            finally:  # the place is freed even if finishing raised (a bug: the caller says it)
                self._busy -= 1
            run = None
            if max_run and not self._closed and self._busy < self._concurrency:
                run = self._take_locked(max_run)
            # A thread that took its next run left the places as they were: whoever waits
            # waited before with the same lanes ready. Only a place freed may wake one.
            if run is None and self._line and self._waiting and self._busy < self._concurrency:
                self._work.notify()
            return run

    def finish(
        self,
        run: Run,
        count: int | None = None,
        mark_done: Callable[[Run], object] | None = None,
    ) -> None:
        """The first ``count`` records of a taken run (all: None) are finished (done,
        dead-lettered, or handed back); the rest, if any, stay in flight as ``run``.

        ``mark_done`` (the offset tracker's) runs under the lock with the finished part, and
        only if the run still belongs to its partition's current assignment: a run that
        outlived a revoke (and maybe a new assignment of the same partition) is not counted
        twice. Finishing the whole run does not release its thread: see :meth:`release`.
        """
        if (count is not None and count <= 0) or not run.alive:
            return
        with self._lock:
            self._finish_locked(run, count, mark_done)

    def _finish_locked(
        self, run: Run, count: int | None, mark_done: Callable[[Run], object] | None
    ) -> None:
        if run.alive:
            head = run if count is None or count >= len(run.messages) else run.split(count)
            current = head.alive and self._partitions.get(head.tp) is head.owner
            if mark_done is not None and current:
                mark_done(head)
            records = len(head.messages)
            self._in_flight -= records
            if head is run:
                run.alive = False
                self._abandoned.discard(run)
            if current:
                part = run.owner
                assert isinstance(part, PartitionState)
                part.in_flight -= records
                part.completed += records
                if head is run:
                    self._retire_locked(part, run)
            if self._closed and not self._in_flight:
                self.idle.notify_all()

    def finish_all(
        self,
        done: list[Run],
        back: list[Run],
        mark_done: Callable[[list[Run]], object] | None = None,
    ) -> None:
        """Whole runs finished, ``done`` or handed ``back`` undone, and their threads (or
        tasks) released, under one lock: the coroutine path ends runs in bursts (timers that
        fire together). ``mark_done`` gets the done runs that are still current."""
        with self._lock:
            current = [
                run for run in done if run.alive and self._partitions.get(run.tp) is run.owner
            ]
            if mark_done is not None and current:
                mark_done(current)
            for run in (*done, *back):
                if not run.alive:
                    continue
                records = len(run.messages)
                owned = self._partitions.get(run.tp) is run.owner
                run.alive = False
                self._in_flight -= records
                self._abandoned.discard(run)
                if owned:
                    part = run.owner
                    assert isinstance(part, PartitionState)
                    part.in_flight -= records
                    part.completed += records
                    self._retire_locked(part, run)
            self._busy -= len(done) + len(back)
            if self._line and self._waiting:
                self._work.notify(min(self._waiting, len(done) + len(back)))
            if self._closed and not self._in_flight:
                self.idle.notify_all()

    def _retire_locked(self, part: PartitionState, run: Run) -> None:
        self._line.retire(part, run)
        if part.closed and not part.in_flight:
            self.idle.notify_all()

    def set_concurrency(self, concurrency: int) -> None:
        with self._lock:
            self._concurrency = concurrency
            self._work.notify_all()

    @property
    def concurrency(self) -> int:
        return self._concurrency

    def close(self) -> None:
        """Wake every waiting Executor thread; ``take`` returns None from now on."""
        with self._lock:
            self._closed = True
            self._work.notify_all()
            self.idle.notify_all()

    @property
    def in_flight(self) -> int:
        """Records taken and not finished."""
        return self._in_flight
