"""Coroutine handlers: one long-lived worker task per place in flight, on one event loop.

Owns: the event loop's thread; its workers (``concurrency`` of them, each taking a run,
handling it and, in the same step, taking the next run into the place it leaves: no task is
made per record, and a busy loop never waits for another thread to hand it work); the feeder
thread that wakes idle workers when runs arrive (up to ``ASYNC_FEED`` in one hand-off); the
finishing of ended runs once per turn of the loop, under one lock; and the attempts of a
coroutine handler: of one record (so ``concurrency`` records wait on I/O at once on one
thread), or of a batch (retried whole, then one record at a time, as with plain functions).
Dead-lettering, which blocks on the producer, runs in a worker thread.

Does not own finishing, shipping or timing runs (the ``Executor``'s, which this serves), nor
the failure policy (``failure_policy.py``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from confluent_kafka import Message

from kafleet.engine.failure_policy import Outcome, describe
from kafleet.engine.handlers import batch_results, first_result
from kafleet.engine.record import Record, of_message
from kafleet.engine.runs import Run

if TYPE_CHECKING:
    from kafleet.engine.executor import Executor

log = logging.getLogger(__name__)

ASYNC_FEED = 64  # runs the feeder hands to the event loop in one go, at most
WAKE_S = 0.1  # a wait between attempts looks for a shutdown this often
# What a handler's failure is: any exception, and a cancellation from inside the handler (a
# sub-task someone cancelled). Workers are never cancelled themselves (they end on a None).
HANDLER_ERRORS = (Exception, asyncio.CancelledError)


class CoroutineRuns:
    def __init__(self, executor: Executor) -> None:
        self.executor = executor
        self.loop = asyncio.new_event_loop()
        self._workers: set[asyncio.Task[None]] = set()
        self._wanted = 0  # workers to keep: the highest concurrency limit asked for
        # Runs taken and not yet started, and the workers waiting for one (None: stop).
        self._ready: deque[Run] = deque()
        self._idle: deque[asyncio.Future[Run | None]] = deque()
        self._turns = 0  # flushes so far: a worker takes a run into its place once per turn
        # Runs ended in this turn of the loop, finished and released together after it.
        self._done: list[Run] = []
        self._back: list[Run] = []
        self._latencies: list[float] = []
        self._flush_due = False

    def start(self, spawn: Callable[[Callable[[], None], str], None]) -> None:
        self.resize(self.executor.queues.concurrency)
        spawn(self.loop.run_forever, "kafleet-event-loop")
        spawn(self._feed, "kafleet-async-feeder")

    def resize(self, concurrency: int) -> None:
        """One worker per run that may be in flight; workers are never retired (an idle one
        is a parked future), so a lower limit just leaves some idle."""
        self.loop.call_soon_threadsafe(self._grow, concurrency)

    def stop(self) -> None:
        """Idle workers end; a handler still running is not interrupted (its task is left
        pending when the loop stops, as the Executor's threads are left running)."""
        self.loop.call_soon_threadsafe(self._stop)

    def _stop(self) -> None:
        while self._idle:
            self._idle.popleft().set_result(None)
        self.loop.call_soon(self.loop.stop)  # after the idle workers' last step

    def _grow(self, concurrency: int) -> None:
        self._wanted = max(self._wanted, concurrency)
        while len(self._workers) < self._wanted and not self.executor.stopping.is_set():
            task = self.loop.create_task(self._worker())
            self._workers.add(task)
            task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        """A worker ended: at a stop, or by a bug in kafleet (reported, and replaced)."""
        self._workers.discard(task)
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            log.error("internal error in a coroutine worker", exc_info=exc)
            self.executor.stats.fatal_error = f"internal error in a coroutine worker: {exc!r}"
        self._grow(self._wanted)

    def _feed(self) -> None:
        """Wait for runs while the loop has none to start (the loop takes the next runs
        itself while runs end)."""
        ex = self.executor
        stopping: threading.Event = ex.stopping
        length = ex.config.max_batch_records if ex.kind.batch else 1
        while not stopping.is_set():
            run = ex.queues.take(timeout=0.2, max_run=length)
            if run is None:
                continue
            runs = [run, *ex.queues.take_more(ASYNC_FEED - 1, length)]  # all that may start
            self.loop.call_soon_threadsafe(self._deliver, runs)

    def _deliver(self, runs: list[Run]) -> None:
        """Runs taken: to idle workers, the rest to the line the busy ones take from next."""
        idle, ready = self._idle, self._ready
        for run in runs:
            if idle:
                idle.popleft().set_result(run)
            else:
                ready.append(run)

    async def _worker(self) -> None:
        """Take a run, handle it, end it; again. A long-lived task per place in flight: no
        task is made per record."""
        ex = self.executor
        batch = ex.kind.batch
        length = ex.config.max_batch_records if batch else 1
        stopping = ex.stopping
        take_more = ex.queues.take_more
        following: list[Run] = []
        took_in = -1  # the turn in which this worker last took a run into its own place
        while True:
            if following:
                run: Run | None = following[0]
            elif self._ready:
                run = self._ready.popleft()
            else:
                waiter: asyncio.Future[Run | None] = self.loop.create_future()
                self._idle.append(waiter)
                run = await waiter
            if run is None:
                return
            done = False
            try:
                if batch:
                    await self._batch(run)
                elif len(run.messages) == 1:
                    done = await self._record(run)
                else:
                    await self._records(run)
            except Exception as exc:  # a bug in kafleet: report it
                log.exception("internal error while handling %s", describe(run))
                ex.stats.fatal_error = f"internal error on {describe(run)}: {exc!r}"
                done = False
            finally:  # whatever happened, the run ends (handed back unless done)
                (self._done if done else self._back).append(run)
                if not self._flush_due:
                    self._flush_due = True
                    self.loop.call_soon(self._flush)
            # The next run at once, in this step, into the place this run leaves; once per
            # turn of the loop, so a handler that never suspends cannot keep the loop from
            # finishing what ended (the second time, the worker waits for the flush).
            if stopping.is_set() or took_in == self._turns:
                following = []
            else:
                following = take_more(1, length, len(self._done) + len(self._back))
                took_in = self._turns

    async def _record(self, run: Run) -> bool:
        """A run of one record (the usual one); whether it is done."""
        ex = self.executor
        if ex.stopping.is_set() or not ex.queues.is_current(run):  # revoked before it began
            return False
        message = run.messages[0]
        record = of_message(run.tp[0], run.tp[1], message)
        started = time.monotonic()
        try:
            result = await ex.handler(record)
            if result is not None:
                ex.ship(run, [(record, result)])
        except HANDLER_ERRORS as raised:  # any handler failure goes to the policy
            call = partial(ex.handler, record)
            return await self._attempts(record, run, call, _failure(raised)) == "done"
        self._latencies.append(time.monotonic() - started)
        return True

    def _flush(self) -> None:
        """The runs that ended in this turn of the loop: finished and released at once."""
        ex = self.executor
        self._flush_due = False
        self._turns += 1
        done, back, latencies = self._done, self._back, self._latencies
        self._done, self._back, self._latencies = [], [], []
        try:
            if latencies:
                ex.succeeded_each(latencies)
            ex.queues.finish_all(done, back, ex.mark_done_all)
        except Exception as exc:  # a bug in kafleet: the worker must not go on as if healthy
            log.exception("internal error while finishing %d runs", len(done) + len(back))
            ex.stats.fatal_error = f"internal error while finishing runs: {exc!r}"
            return
        if not ex.stopping.is_set():  # the freed places refilled in this turn of the loop,
            length = ex.config.max_batch_records if ex.kind.batch else 1  # not by the feeder
            self._deliver(ex.queues.take_more(len(self._idle), length))

    async def _records(self, run: Run) -> None:
        await self._one_by_one(run, lambda message, record: partial(self.executor.handler, record))

    async def _one_by_one(
        self, run: Run, call: Callable[[Message, Record], Callable[[], Awaitable[Any]]]
    ) -> None:
        """Each record of the run alone, with the whole policy; a run whose partition is
        revoked or stopped, or a shutdown, hands the rest back undone."""
        ex = self.executor
        topic, partition = run.tp
        for message in list(run.messages):
            if ex.stopping.is_set() or not ex.queues.is_current(run):
                ex.finish(run, done=False)
                return
            record = of_message(topic, partition, message)
            outcome = await self._attempts(record, run, call(message, record))
            ex.finish(run, 1 if len(run) > 1 else None, done=outcome == "done")

    async def _batch(self, run: Run) -> None:
        ex = self.executor
        attempt = 0
        started = time.monotonic()
        while True:
            attempt += 1
            try:
                results = batch_results(await ex.handler(run.messages), len(run))
                if results is not None:
                    ex.ship_results(run, results)
            except HANDLER_ERRORS as raised:  # any handler failure goes to the policy
                exc = _failure(raised)
                delay = ex.policy.batch_retry_delay(run, attempt, exc)
                if delay is not None and await self._wait(delay):
                    if ex.queues.is_current(run):
                        continue
                    ex.finish(run, done=False)  # revoked or stopped meanwhile: hand back
                    return
                if len(run) == 1:  # a batch of one had its attempts: the policy now
                    record = of_message(run.tp[0], run.tp[1], run.messages[0])
                    outcome = await asyncio.to_thread(ex.policy.give_up, record, attempt, exc)
                    ex.finish(run, done=outcome == "done")
                    return
                break
            ex.succeeded(time.monotonic() - started, len(run))
            ex.finish(run)
            return
        # The last attempt failed: one record at a time.
        await self._one_by_one(run, lambda message, record: partial(self._one, message))

    async def _wait(self, seconds: float) -> bool:
        """Sleep before the next attempt; False if a shutdown cut it short."""
        deadline = time.monotonic() + seconds
        while not self.executor.stopping.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            await asyncio.sleep(min(left, WAKE_S))
        return False

    async def _one(self, message: Message) -> Any:
        return first_result(batch_results(await self.executor.handler([message]), 1))

    async def _attempts(
        self,
        record: Record,
        run: Run,
        call: Callable[[], Awaitable[Any]],
        failed: Exception | None = None,
    ) -> Outcome:
        """A record's attempts (after a first one that raised ``failed``, if given), then
        the policy."""
        ex = self.executor
        attempt = 0 if failed is None else 1
        started = time.monotonic()
        while True:
            if failed is None:
                attempt += 1
                try:
                    result = await call()
                    if result is not None:
                        ex.ship(run, [(record, result)])
                except HANDLER_ERRORS as raised:  # any handler failure goes to the policy
                    failed = _failure(raised)
                else:
                    ex.succeeded(time.monotonic() - started, 1)
                    return "done"
            delay = ex.policy.retry_delay(record, attempt, failed)
            if delay is not None and await self._wait(delay):
                failed = None
                continue
            return await asyncio.to_thread(ex.policy.give_up, record, attempt, failed)


def _failure(raised: BaseException) -> Exception:
    """A handler's failure as an exception for the policy: a cancellation from inside the
    handler becomes a ``RuntimeError`` that says so (retried, then dead-lettered)."""
    if isinstance(raised, Exception):
        return raised
    failure = RuntimeError(f"the handler was cancelled ({type(raised).__name__})")
    failure.__cause__ = raised
    return failure
