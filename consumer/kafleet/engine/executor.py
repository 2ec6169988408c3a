"""Runs the user's handler on queued runs of records, in parallel.

Owns: the Executor's thread pool for plain functions (coroutines run on one event loop:
``coroutines.py``), the handler's kinds (one record or a batch at a time: ``handlers.py``),
the length of a run, and reporting each finished run: done to the offset tracker first,
then finished to the queues, so a revoke that waits for the queues always sees the offsets.
Time, counters and offsets move once per run, never per record. A thread running fast records
one after another reports them when its run ends; a reporter thread reports the finished
records of runs older than ``REPORT_AFTER_S``, so a slow record never holds back the fast
ones before it. The recent p99 handler latency, which bounds a revoke's wait, is kept here.

Does not own the attempts of a plain function's run (``function_runs.py``), choosing the next
run (``ready_line.py``) or the concurrency limit (``dispatch.py``), waiting between attempts
and the policy after the last (``failure_policy.py``), nor committing (``commits.py``). A
poison record delays only its own lane: retries sleep in the thread that holds it, and every
other lane keeps its threads.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from kafleet.config.model import ConsumerConfig
from kafleet.engine.coroutines import CoroutineRuns
from kafleet.engine.dead_letter import DeadLetterWriter
from kafleet.engine.failure_policy import FailurePolicy, describe
from kafleet.engine.function_runs import FunctionRuns
from kafleet.engine.handlers import Handler, TableRows, is_table, kind_of
from kafleet.engine.offsets import OffsetTracker
from kafleet.engine.record import Record, of_message
from kafleet.engine.runs import Run
from kafleet.engine.work_queue import WorkQueues
from kafleet.health.state import Stats

log = logging.getLogger(__name__)

ResultSink = Callable[[Record, Any], None]
# Results of a run: (record, result) pairs, or a batch handler's table with its messages.
ResultsSink = Callable[[Run, list[tuple[Record, Any]] | TableRows], None]
MAX_RUN = 256  # records one thread takes at once, at most (fast handlers of one record)
RUN_BUDGET_S = 0.002  # the handler time one run aims at
REPORT_AFTER_S = 0.02  # records finished in a run still going are reported after this
RECENT_LATENCIES = 1024  # handler latencies kept for the recent p99


class Active:
    """The run one worker thread is on, and how many of its records are finished."""

    __slots__ = ("done", "lock", "reported", "run")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.run: Run | None = None
        self.done = 0  # records of the run finished (done) so far, from its first
        self.reported = 0  # of those, reported to the queues already

    def begin(self, run: Run) -> None:
        with self.lock:
            self.run, self.done, self.reported = run, 0, 0


class Executor:
    def __init__(
        self,
        handler: Handler,
        config: ConsumerConfig,
        queues: WorkQueues,
        offsets: OffsetTracker,
        stats: Stats,
        dead_letters: DeadLetterWriter | None = None,
        on_results: ResultsSink | None = None,
    ) -> None:
        self.handler: Any = handler
        self.kind = kind_of(handler)
        self.config = config
        self.queues = queues
        self.offsets = offsets
        self.stats = stats
        self.on_results = on_results
        self.is_async = self.kind.coroutine
        self.stopping = threading.Event()
        self.halted = False  # ``stopping`` as a plain flag: read once a record, it costs no call
        self.policy = FailurePolicy(config, queues, stats, dead_letters, self.stopping)
        self._threads: list[threading.Thread] = []
        self._coroutines: CoroutineRuns | None = None
        self._functions = FunctionRuns(self)
        self._latency = 1.0  # seconds per record; runs of one record until handlers prove fast
        self._recent: deque[float] = deque(maxlen=RECENT_LATENCIES)
        self._active: list[Active] = []
        self._mark_done = None if config.guarantee == "at-most-once" else self._done

    # -- life cycle -----------------------------------------------------------------------

    def start(self) -> None:
        if self.is_async:
            self._coroutines = CoroutineRuns(self)
            self._coroutines.start(self._spawn)
        else:
            self.resize(self.queues.concurrency)
            self._spawn(self._report_stale, "kafleet-executor-reporter")

    def resize(self, concurrency: int) -> None:
        """Apply a new concurrency limit, starting threads if the pool is too small."""
        self.queues.set_concurrency(concurrency)
        if self._coroutines is not None:
            self._coroutines.resize(concurrency)
        elif not self.is_async:
            while len(self._active) < concurrency:
                active = Active()
                self._active.append(active)
                self._spawn(partial(self._work, active), f"kafleet-executor-{len(self._active)}")

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop taking records and wake every thread; in-flight handlers are not interrupted."""
        self.halted = True
        self.stopping.set()
        self.queues.close()
        if self._coroutines is not None:
            self._coroutines.stop()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def recent_p99(self) -> float | None:
        """The p99 of the last RECENT_LATENCIES handler latencies (None before 20 records)."""
        recent = sorted(self._recent)
        if len(recent) < 20:
            return None
        return recent[min(len(recent) - 1, int(len(recent) * 0.99))]

    def _run_length(self) -> int:
        """Records per run: a batch handler's ``max_batch_records``; for a handler of one
        record, about RUN_BUDGET_S of work at its recent latency, so a fast handler pays for
        the hand-off once per run and a slow one runs one record per thread."""
        if self.kind.batch:
            return self.config.max_batch_records
        return max(1, min(MAX_RUN, int(RUN_BUDGET_S / max(self._latency, 1e-7))))

    # -- finishing ------------------------------------------------------------------------

    def _done(self, run: Run) -> None:
        self.offsets.done_many([(run.tp, start, end, count) for start, end, count in run.ranges])

    def finish(self, run: Run, count: int | None = None, done: bool = True) -> None:
        """The first ``count`` records of ``run`` (all: None) are finished: done (the offset
        tracker learns it, then the queues), or handed back undone."""
        self.queues.finish(run, count, self._mark_done if done else None)

    def report(self, active: Active, back: int = 0, rest: bool = False) -> None:
        """Report the records of the active run finished so far as done, then hand back
        ``back`` records after them undone (``rest``: all the others), under the active
        run's lock, so the reporter thread and the worker never report the same records."""
        with active.lock:
            run = active.run
            if run is None or not run.alive:
                return
            count = active.done - active.reported
            if count:
                self.finish(run, count if count < len(run) else None)
                active.reported += count
            if run.alive and (back or rest):
                back = len(run) if rest else min(back, len(run))
                self.finish(run, back if back < len(run) else None, done=False)
                active.reported += back
                active.done = active.reported

    def _report_stale(self) -> None:
        """Report the finished records of runs that started more than REPORT_AFTER_S ago."""
        while not self.stopping.wait(REPORT_AFTER_S):
            older_than = time.monotonic() - REPORT_AFTER_S
            for active in list(self._active):
                run = active.run
                if run is not None and run.started < older_than and active.done > active.reported:
                    try:
                        self.report(active)
                    except Exception as exc:  # a bug in kafleet: report it, keep reporting
                        log.exception("internal error while reporting %s", describe(run))
                        self.stats.fatal_error = f"internal error on {describe(run)}: {exc!r}"

    # -- plain functions ------------------------------------------------------------------

    def _work(self, active: Active) -> None:
        run: Run | None = None
        while not self.stopping.is_set():
            if run is None:
                run = self.queues.take(timeout=0.2, max_run=self._run_length())
                if run is None:
                    continue
            ended, run = run, None
            self._handle(ended, active)
            try:
                run = self._end(ended, active)
            except Exception as exc:  # noqa: BLE001 - a bug in kafleet (offsets marked twice),
                self._internal_error(ended, exc)  # logged; the place is free, the run goes back
                if ended.alive:
                    self.finish(ended, done=False)
        if run is not None:  # taken as the Executor stopped: handed back, never started
            self.finish(run, done=False)
            self.queues.release()

    def _end(self, run: Run, active: Active) -> Run | None:
        """The run's records done and not reported yet are finished, this thread's place is
        freed and its next run taken, in one step of the queues: no waiting thread is woken
        for a run this one goes on with. The reporter thread no longer sees the run."""
        with active.lock:
            count = active.done - active.reported if active.run is run else 0
            active.run = None
        if 0 < count < len(run.messages):  # never so today: the rest would have no holder
            self.finish(run, count)
            self.finish(run, done=False)
            count = 0
        return self.queues.release(
            self._run_length(), run if count else None, None, self._mark_done
        )

    def _handle(self, run: Run, active: Active) -> None:
        try:
            if self.kind.batch:
                self._functions.run_batch(run)
            else:
                self._functions.run_records(run, active)
        except Exception as exc:  # noqa: BLE001 - a bug in kafleet: logged, the thread kept
            self._internal_error(run, exc)
            if active.run is run:
                self.report(active, rest=True)
            elif run.alive:
                self.finish(run, done=False)

    def _internal_error(self, run: Run, exc: Exception) -> None:
        log.exception("internal error while handling %s", describe(run))
        self.stats.fatal_error = f"internal error on {describe(run)}: {exc!r}"

    # -- shared by both kinds --------------------------------------------------------------

    def ship(self, run: Run, pairs: list[tuple[Record, Any]] | TableRows) -> None:
        """Hand results on (to the shipper) before their records are marked done; the results
        of a run that outlived its partition's assignment are dropped (its next owner redoes
        it)."""
        if self.on_results is not None and self.queues.owns(run):
            self.on_results(run, pairs)

    def ship_results(self, run: Run, results: Sequence[Any] | Any) -> None:
        """A batch handler's results, one per record of ``run`` (None: no result), or its
        Arrow table of one row per record."""
        if self.on_results is None or not self.queues.owns(run):
            return
        if is_table(results):
            self.on_results(run, TableRows(results, run.messages))
        else:
            self.on_results(run, _pairs(run, results))

    def mark_done_all(self, runs: list[Run]) -> None:
        """The offset tracker learns that these runs are done, in one step."""
        if self._mark_done is not None:
            self.offsets.done_many([(r.tp, *span) for r in runs for span in r.ranges])

    def succeeded_each(self, latencies: list[float]) -> None:
        """Records of one record's runs handled in these times (the coroutine path's)."""
        self.stats.observe_each(latencies)
        self._recent.extend(latencies)  # (no moving average: coroutine runs are not sized by it)

    def succeeded(self, seconds: float, records: int) -> None:
        self.stats.observe_run(seconds, records)
        per_record = seconds / records
        self._recent.append(per_record)
        self._latency += (per_record - self._latency) * 0.05  # a moving average, racy, harmless


def _pairs(run: Run, results: Sequence[Any]) -> list[tuple[Record, Any]]:
    topic, partition = run.tp
    return [
        (of_message(topic, partition, message), result)
        for message, result in zip(run.messages, results, strict=True)
        if result is not None
    ]
