"""Runs the user's handler on queued records, in parallel, with retries and a failure policy.

Owns: the Executor's threads (a pool for plain functions; one event loop for coroutines, fed
by one thread), the attempt loop with exponential backoff (``retry.py``), the failure policy
after the last attempt (dead-letter topic or stop the partition), and reporting each finished
record: done to the offset tracker first, then finished to the queues, so a revoke that waits
for the queues always sees the offsets. A thread running fast records one after another
reports them together when its run ends; a reporter thread reports those finished more than
``REPORT_AFTER_S`` ago, so a slow record never holds back the fast ones before it. The recent
p99 handler latency, which bounds a revoke's wait, is kept here too.

Does not own choosing the next record or the concurrency limit (``work_queue.py``), nor
committing (``commits.py``). A poison record delays only its own lane: retries sleep in the
thread that holds it, and every other lane keeps its threads.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from kafleet import retry
from kafleet.config import ConsumerConfig
from kafleet.dead_letter import DeadLetterWriter, dead_letter_headers
from kafleet.errors import HandlerError
from kafleet.offsets import OffsetTracker
from kafleet.record import Record
from kafleet.state import Stats
from kafleet.work_queue import WorkQueues

log = logging.getLogger(__name__)

Handler = Callable[[Record], Any] | Callable[[Record], Awaitable[Any]]
ResultSink = Callable[[Record, Any], None]
MAX_RUN = 256  # records one thread takes at once, at most (fast handlers)
RUN_BUDGET_S = 0.002  # the handler time one run aims at
REPORT_AFTER_S = 0.02  # records finished in a run still going are reported after this
RECENT_LATENCIES = 1024  # handler latencies kept for the recent p99


class _Finished:
    """The records one worker thread finished in its current run and has not reported yet.

    A run reports its records when it ends, under one lock for all of them; the reporter
    thread reports those that have waited longer than ``REPORT_AFTER_S``, so a slow record
    late in a run never holds back the commit of the fast ones before it.
    """

    __slots__ = ("lock", "records", "since")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.records: list[Record] = []
        self.since = 0.0  # monotonic time of the oldest unreported record (0: none)

    def add(self, record: Record) -> None:
        with self.lock:
            if not self.records:
                self.since = time.monotonic()
            self.records.append(record)

    def take(self, older_than: float | None = None) -> list[Record]:
        with self.lock:
            if not self.records or (older_than is not None and self.since > older_than):
                return []
            records, self.records = self.records, []
            return records


class Executor:
    def __init__(
        self,
        handler: Handler,
        config: ConsumerConfig,
        queues: WorkQueues,
        offsets: OffsetTracker,
        stats: Stats,
        dead_letters: DeadLetterWriter | None = None,
        on_result: ResultSink | None = None,
    ) -> None:
        self.handler = handler
        self.config = config
        self.queues = queues
        self.offsets = offsets
        self.stats = stats
        self.dead_letters = dead_letters
        self.on_result = on_result
        self.is_async = inspect.iscoroutinefunction(handler)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._latency = 1.0  # seconds; runs of one record until handlers prove fast
        self._recent: deque[float] = deque(maxlen=RECENT_LATENCIES)
        self._finished: list[_Finished] = []

    # -- life cycle -----------------------------------------------------------------------

    def start(self) -> None:
        if self.is_async:
            self._loop = asyncio.new_event_loop()
            self._spawn(self._loop.run_forever, "kafleet-event-loop")
            self._spawn(self._feed_loop, "kafleet-async-feeder")
        else:
            self.resize(self.queues.concurrency)
            self._spawn(self._report_stale, "kafleet-executor-reporter")

    def resize(self, concurrency: int) -> None:
        """Apply a new concurrency limit, starting threads if the pool is too small."""
        self.queues.set_concurrency(concurrency)
        if not self.is_async:
            while len(self._threads) < concurrency:
                self._spawn(self._work, f"kafleet-executor-{len(self._threads)}")

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop taking records and wake every thread; in-flight handlers are not interrupted."""
        self._stop.set()
        self.queues.close()
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    # -- plain functions ------------------------------------------------------------------

    def _work(self) -> None:
        finished = _Finished()
        self._finished.append(finished)
        while not self._stop.is_set():
            run = self.queues.take(timeout=0.2, max_run=self._run_length())
            try:
                for i, record in enumerate(run):
                    if i and not self.queues.is_current(record):
                        self.queues.complete_many(run[i:])  # revoked or stopped mid-run
                        break
                    if self._run_guarded(record):
                        finished.add(record)
            finally:
                self._finish_many(finished.take())
                if run:
                    self.queues.release()

    def _report_stale(self) -> None:
        """Report records that runs still going finished more than REPORT_AFTER_S ago."""
        while not self._stop.wait(REPORT_AFTER_S):
            older_than = time.monotonic() - REPORT_AFTER_S
            for finished in list(self._finished):
                self._finish_many(finished.take(older_than))

    def recent_p99(self) -> float | None:
        """The p99 of the last RECENT_LATENCIES handler latencies (None before 20 records)."""
        recent = sorted(self._recent)
        if len(recent) < 20:
            return None
        return recent[min(len(recent) - 1, int(len(recent) * 0.99))]

    def _run_length(self) -> int:
        """Records per run: about RUN_BUDGET_S of work at the handlers' recent latency, so a
        fast handler pays for the hand-off once per run and a slow one runs one per thread."""
        return max(1, min(MAX_RUN, int(RUN_BUDGET_S / max(self._latency, 1e-7))))

    def _run_guarded(self, record: Record) -> bool:
        try:
            return self._run_sync(record)
        except Exception as exc:  # a bug in kafleet: report it, keep the thread
            log.exception("internal error while finishing %s", record)
            self.stats.fatal_error = f"internal error on {record}: {exc!r}"
            self.queues.complete(record)
            return False

    def _run_sync(self, record: Record) -> bool:
        """Attempt the record; True if it is done (handled or dead-lettered) and must be
        finished, False if it was handed back already (stopped, or shutting down)."""
        attempt = 0
        started = time.monotonic()
        while True:
            attempt += 1
            try:
                result = self.handler(record)
                self._ship(record, result)  # a result the sink cannot take fails the record
            except Exception as exc:  # noqa: BLE001 - any handler failure goes to the policy
                if self._retry_after(record, attempt, exc):
                    continue
                return self._give_up(record, attempt, exc)
            self._succeeded(time.monotonic() - started)
            return True

    # -- coroutines -----------------------------------------------------------------------

    def _feed_loop(self) -> None:
        assert self._loop is not None
        while not self._stop.is_set():
            for record in self.queues.take(timeout=0.2):
                asyncio.run_coroutine_threadsafe(self._run_async(record), self._loop)

    async def _run_async(self, record: Record) -> None:
        try:
            await self._attempt_async(record)
        finally:
            self.queues.release()

    async def _attempt_async(self, record: Record) -> None:
        attempt = 0
        started = time.monotonic()
        while True:
            attempt += 1
            try:
                result = await self.handler(record)
                self._ship(record, result)
            except Exception as exc:  # noqa: BLE001
                delay = self._retry_delay(record, attempt, exc)
                if delay is not None:
                    await asyncio.sleep(delay)
                    continue
                if await asyncio.to_thread(self._give_up, record, attempt, exc):
                    self._finish_many([record])
                return
            self._succeeded(time.monotonic() - started)
            self._finish_many([record])
            return

    # -- shared outcome handling ----------------------------------------------------------

    def _retry_delay(self, record: Record, attempt: int, exc: Exception) -> float | None:
        self.stats.add(records_failed=1)
        if self._stop.is_set() or not retry.should_retry(self.config.retry, attempt):
            return None
        delay = retry.backoff_s(self.config.retry, attempt)
        log.warning(
            "attempt %d on %s failed (%s: %s); retrying in %.3f s",
            attempt,
            record,
            type(exc).__name__,
            exc,
            delay,
        )
        self.stats.add(retries=1)
        return delay

    def _retry_after(self, record: Record, attempt: int, exc: Exception) -> bool:
        delay = self._retry_delay(record, attempt, exc)
        if delay is None:
            return False
        return not self._stop.wait(delay)  # a stop cuts the wait short and ends the retries

    def _ship(self, record: Record, result: Any) -> None:
        """Hand a result on (to the shipper) before the record is marked done; the result of
        a run that outlived its partition's assignment is dropped (its next owner redoes it)."""
        if self.on_result is not None and result is not None and self.queues.owns(record):
            self.on_result(record, result)

    def _succeeded(self, seconds: float) -> None:
        self.stats.observe_latency(seconds)
        self._recent.append(seconds)
        self._latency += (seconds - self._latency) * 0.05  # a moving average, racy but harmless

    def _finish_many(self, records: list[Record]) -> None:
        """Done: the offset tracker learns it, then the queues (see WorkQueues.complete).
        At most once, the Poller marked them done before they ran."""
        if not records:
            return
        if self.config.guarantee == "at-most-once":
            self.queues.complete_many(records)
        else:
            self.queues.complete_many(
                records, lambda current: self.offsets.done_many([(r.tp, r.offset) for r in current])
            )

    def _give_up(self, record: Record, attempts: int, exc: Exception) -> bool:
        """After the last attempt: True if dead-lettered (to be finished as done); False if
        the record was handed back undone (shutting down, or its partition stopped)."""
        error = HandlerError(record.topic, record.partition, record.offset, attempts, exc)
        if self._stop.is_set():  # shutting down: leave it undone, it is retried after restart
            self.queues.complete(record)
            return False
        if self.config.on_failure == "dead-letter" and self.dead_letters is not None:
            try:
                headers = dead_letter_headers(record, exc, attempts, self.config.group_id)
                self.dead_letters.send(record, headers)
            except Exception as dlt_exc:  # noqa: BLE001 - cannot park it: stop the partition
                log.error(
                    "%s; dead-lettering failed too (%s): stopping %s[%d]",
                    error,
                    dlt_exc,
                    record.topic,
                    record.partition,
                )
                self.queues.stop_partition(record.tp, f"{error}; dead-lettering failed: {dlt_exc}")
                self.queues.complete(record)
                return False
            log.error("%s; sent to %s", error, self.dead_letters.topic)
            self.stats.add(dead_lettered=1)
            return True
        log.error(
            "%s; stopping %s[%d] (on_failure: stop-partition)",
            error,
            record.topic,
            record.partition,
        )
        self.queues.stop_partition(record.tp, str(error))
        self.queues.complete(record)
        return False
