"""What happens to a record or a batch whose handler failed: wait and try again, or give up.

Owns: the wait before the next attempt of a record or of a whole batch (``retry.py``'s backoff,
cut short by a shutdown), the counters and the log lines of failed attempts, and, after a
record's last attempt, the failure policy: the dead-letter topic (the record is then done), or
stopping its partition (``on_failure: stop-partition``, or a dead-letter topic that cannot be
written: the record is handed back undone). A shutdown hands a failing record back undone, so
that it is tried again after the restart.

Does not own calling handlers (``function_runs.py``, ``coroutines.py``) or reporting outcomes
to the queues (``executor.py``).
"""

from __future__ import annotations

import logging
import threading
from typing import Literal

from kafleet.config.model import ConsumerConfig
from kafleet.engine import retry
from kafleet.engine.dead_letter import DeadLetterWriter, dead_letter_headers
from kafleet.engine.record import Record
from kafleet.engine.runs import Run, offset_of
from kafleet.engine.work_queue import WorkQueues
from kafleet.errors import HandlerError
from kafleet.health.state import Stats

log = logging.getLogger(__name__)

Outcome = Literal["done", "back"]  # done (handled or dead-lettered), or handed back undone


class FailurePolicy:
    def __init__(
        self,
        config: ConsumerConfig,
        queues: WorkQueues,
        stats: Stats,
        dead_letters: DeadLetterWriter | None,
        stopping: threading.Event,
    ) -> None:
        self.config = config
        self.queues = queues
        self.stats = stats
        self.dead_letters = dead_letters
        self.stopping = stopping

    def retry_delay(self, record: Record, attempt: int, exc: Exception) -> float | None:
        """A record's attempt failed: the wait before the next, or None after the last."""
        self.stats.add(records_failed=1)
        if self.stopping.is_set() or not retry.should_retry(self.config.retry, attempt):
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

    def retry_after(self, record: Record, attempt: int, exc: Exception) -> bool:
        """Wait before a record's next attempt; False if there is none (the last failed, or
        a shutdown cut the wait short)."""
        delay = self.retry_delay(record, attempt, exc)
        if delay is None:
            return False
        return not self.stopping.wait(delay)

    def batch_retry_delay(self, run: Run, attempt: int, exc: Exception) -> float | None:
        """A batch's attempt failed: the wait before the next, or None after the last (its
        records are then tried one at a time)."""
        self.stats.add(records_failed=len(run))
        if self.stopping.is_set() or not retry.should_retry(self.config.retry, attempt):
            log.warning(
                "attempt %d on the batch %s failed (%s: %s); trying its records one at a time",
                attempt,
                describe(run),
                type(exc).__name__,
                exc,
            )
            return None
        delay = retry.backoff_s(self.config.retry, attempt)
        log.warning(
            "attempt %d on the batch %s failed (%s: %s); retrying in %.3f s",
            attempt,
            describe(run),
            type(exc).__name__,
            exc,
            delay,
        )
        self.stats.add(retries=1)
        return delay

    def give_up(self, record: Record, attempts: int, exc: Exception) -> Outcome:
        """After a record's last attempt: done if dead-lettered; handed back undone if
        shutting down or the partition stops."""
        error = HandlerError(record.topic, record.partition, record.offset, attempts, exc)
        if self.stopping.is_set():  # shutting down: leave it undone, it is retried after restart
            return "back"
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
                return "back"
            log.error("%s; sent to %s", error, self.dead_letters.topic)
            self.stats.add(dead_lettered=1)
            return "done"
        log.error(
            "%s; stopping %s[%d] (on_failure: stop-partition)",
            error,
            record.topic,
            record.partition,
        )
        self.queues.stop_partition(record.tp, str(error))
        return "back"


def describe(run: Run) -> str:
    """``topic[partition]@first..last`` of a run's records."""
    if not run.messages:
        return f"{run.tp[0]}[{run.tp[1]}]"
    return f"{run.tp[0]}[{run.tp[1]}]@{offset_of(run.messages[0])}..{run.last_offset}"
