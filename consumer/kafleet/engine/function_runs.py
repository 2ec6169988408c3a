"""Plain-function handlers: one run's records through the handler, on an Executor thread.

Owns: the attempts of a plain function (coroutines: ``coroutines.py``) on one run, taken by
one of the Executor's threads: a handler of one record on each record of the run in turn,
timed once, the run's thread marking each record finished as it goes; or a batch handler on
the whole run in one call. A record that fails is tried again as the retry policy says, then
meets the failure policy. A batch that fails is retried whole, as the retry policy says; after
its last attempt, its records are tried one at a time (a batch of one each), each with the
whole policy again, so a poison record ends alone in the dead-letter topic (or stops its
partition) and the records beside it are done. A revoke, a stop or a shutdown hands the
records not yet handled back undone.

Does not own the threads, the run length, reporting finished records, shipping results or
timing (the ``Executor``'s, ``executor.py``, which this serves), nor waiting between attempts
and the policy after the last (``failure_policy.py``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from confluent_kafka import Message

from kafleet.engine.failure_policy import Outcome
from kafleet.engine.handlers import batch_results, first_result
from kafleet.engine.partition_state import PartitionState
from kafleet.engine.record import Record, of_message
from kafleet.engine.runs import Run

if TYPE_CHECKING:
    from kafleet.engine.executor import Active, Executor


class FunctionRuns:
    def __init__(self, executor: Executor) -> None:
        self.executor = executor

    def run_records(self, run: Run, active: Active) -> None:
        """A handler of one record: each record of the run in turn, timed once."""
        ex = self.executor
        active.begin(run)
        topic, partition = run.tp
        handler, owner, ship = ex.handler, run.owner, ex.on_results
        assert isinstance(owner, PartitionState)
        messages = run.messages  # the run's own list: a split gives the run a new one
        tried, failed = len(messages), 0  # handled: those tried whose first attempt passed
        started = time.monotonic()
        for i, message in enumerate(messages):
            if i and (owner.closed or ex.halted):  # revoked, stopped, shut down
                ex.report(active, rest=True)
                tried = i
                break
            record = of_message(topic, partition, message)
            try:
                result = handler(record)
                if result is not None and ship is not None:
                    ex.ship(run, [(record, result)])
            except Exception as exc:  # noqa: BLE001 - any handler failure goes to the policy
                failed += 1
                failed_at = time.monotonic()
                outcome = self._record_failed(record, message, run, exc)
                started += time.monotonic() - failed_at  # retries and backoff: not the run's
                if outcome == "back":
                    ex.report(active, back=1)
                    continue
            active.done = i + 1
        # The records done and not reported yet are finished as the thread takes its next run
        # (``Executor._end``): one step of the queues for both.
        if tried > failed:
            ex.succeeded(time.monotonic() - started, tried - failed)

    def _record_failed(self, record: Record, message: Message, run: Run, exc: Exception) -> Outcome:
        """A record's first attempt failed: the rest of its attempts, then the policy."""
        ex = self.executor
        attempt = 1
        while ex.policy.retry_after(record, attempt, exc):
            attempt += 1
            started = time.monotonic()
            try:
                result = self._call_one(record, message)
                if result is not None:
                    ex.ship(run, [(record, result)])
            except Exception as again:  # noqa: BLE001
                exc = again
                continue
            ex.succeeded(time.monotonic() - started, 1)
            return "done"
        return ex.policy.give_up(record, attempt, exc)

    def _call_one(self, record: Record, message: Message) -> Any:
        """The handler on one record, whatever its kind (a batch handler gets a batch of
        one)."""
        ex = self.executor
        if not ex.kind.batch:
            return ex.handler(record)
        return first_result(batch_results(ex.handler([message]), 1))

    def run_batch(self, run: Run) -> None:
        """A batch handler: the whole run in one call, retried whole; after the last
        attempt, one record at a time."""
        ex = self.executor
        attempt = 0
        started = time.monotonic()
        while True:
            attempt += 1
            try:
                results = batch_results(ex.handler(run.messages), len(run))
                if results is not None:
                    ex.ship_results(run, results)
            except Exception as exc:  # noqa: BLE001
                delay = ex.policy.batch_retry_delay(run, attempt, exc)
                if delay is not None and not ex.stopping.wait(delay):
                    if ex.queues.is_current(run):
                        continue
                    ex.finish(run, done=False)  # revoked or stopped meanwhile: hand back
                    return
                if len(run) == 1:  # a batch of one had its attempts: the policy now
                    record = of_message(run.tp[0], run.tp[1], run.messages[0])
                    ex.finish(run, done=ex.policy.give_up(record, attempt, exc) == "done")
                    return
                self._one_at_a_time(run)
                return
            ex.succeeded(time.monotonic() - started, len(run))
            ex.finish(run)
            return

    def _one_at_a_time(self, run: Run) -> None:
        """A batch's last attempt failed: each record alone, with the whole policy."""
        ex = self.executor
        topic, partition = run.tp
        for message in list(run.messages):
            record = of_message(topic, partition, message)
            if ex.stopping.is_set() or not ex.queues.is_current(run):
                ex.finish(run, done=False)  # shutting down, revoked or stopped: hand back
                return
            started = time.monotonic()
            try:
                result = self._call_one(record, message)
                if result is not None:
                    ex.ship(run, [(record, result)])
                outcome: Outcome = "done"
                ex.succeeded(time.monotonic() - started, 1)
            except Exception as exc:  # noqa: BLE001
                outcome = self._record_failed(record, message, run, exc)
            ex.finish(run, 1 if len(run) > 1 else None, done=outcome == "done")
