"""A share record's attempts, on the handlers' pool, and the outcome each one reports.

Owns: calling the handler (a function on a pool thread, or a coroutine on the pool's loop),
timing it, and turning its end into an ``Outcome`` for the member that acquired the record:
success (ACCEPT, with its result for the sink, or passed to ``on_result``), another attempt
after the backoff, RELEASE, or the dead-letter topic then ACCEPT or REJECT
(``outcomes.after_failure`` decides). A stop that cuts a backoff short gives the record back
(RELEASE), or dead-letters it on its last delivery, where a release would let the broker
archive it. The counts of failures, retries and dead letters.

Does not own the policy (``outcomes.py``), acknowledging (``member.py``) or the pool.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from kafleet.config.model import ConsumerConfig
from kafleet.engine import retry
from kafleet.engine.dead_letter import DeadLetterWriter, dead_letter_headers
from kafleet.engine.record import Record
from kafleet.errors import HandlerError
from kafleet.health.state import Stats
from kafleet.share.client import Ack, ShareRecord
from kafleet.share.member import Member, Outcome
from kafleet.share.outcomes import After, Failure, after_failure
from kafleet.share.state import ShareCounts

log = logging.getLogger("kafleet.share.share_consumer")
STOP_CHECK_S = 0.1  # how often a coroutine's backoff looks for a stop
ResultSink = Callable[[Record, Any], None]


class Attempts:
    def __init__(
        self,
        handler: Any,
        config: ConsumerConfig,
        stats: Stats,
        counts: ShareCounts,
        dead_letters: DeadLetterWriter,
        *,
        keep_results: bool,
        on_result: ResultSink | None = None,
    ) -> None:
        """``keep_results``: a sink writes the results, so they go with the outcome."""
        self.handler = handler
        self.config = config
        self.stats = stats
        self.counts = counts
        self.dead_letters = dead_letters
        self.keep_results = keep_results
        self.on_result = on_result

    def run(self, record: ShareRecord, member: Member) -> None:
        attempt = 0
        while True:
            attempt += 1
            started = time.monotonic()
            try:
                result = self.handler(record.record)
            except Exception as exc:  # noqa: BLE001 - the handler's failure: the policy's call
                delay = self._failed(record, member, attempt, started, exc)
                if delay is None:
                    return
                if member.stopping.wait(delay):
                    self._failed(record, member, attempt, started, exc, stopped=True)
                    return
                continue
            self._succeeded(record, member, result, time.monotonic() - started)
            return

    async def run_async(self, record: ShareRecord, member: Member) -> None:
        attempt = 0
        while True:
            attempt += 1
            started = time.monotonic()
            try:
                result = await self.handler(record.record)
            except Exception as exc:  # noqa: BLE001
                delay = await asyncio.to_thread(self._failed, record, member, attempt, started, exc)
                if delay is None:
                    return
                if not await _backoff(delay, member):
                    await asyncio.to_thread(
                        self._failed, record, member, attempt, started, exc, stopped=True
                    )
                    return
                continue
            self._succeeded(record, member, result, time.monotonic() - started)
            return

    def _succeeded(self, record: ShareRecord, member: Member, result: Any, seconds: float) -> None:
        self.stats.observe_run(seconds)
        if self.on_result is not None and not self.keep_results:
            self.on_result(record.record, result)
        has = self.keep_results and result is not None
        member.finish(Outcome(record, Ack.ACCEPT, result, has))

    def _failed(
        self,
        record: ShareRecord,
        member: Member,
        attempt: int,
        started: float,
        exc: Exception,
        *,
        stopped: bool = False,
    ) -> float | None:
        """The wait before another attempt, or None once the record's outcome is reported.
        ``stopped``: a stop cut the wait before another attempt short."""
        share = self.config.share
        backoff = 0.0
        if not stopped:  # a stop that cut the wait short: this failure is counted already
            self.stats.add(records_failed=1)
            backoff = retry.backoff_s(self.config.retry, attempt)
        lasted = time.monotonic() - started
        failure = Failure(attempt, record.delivery_count, member.lock_left_s(), backoff, lasted)
        after = after_failure(
            failure,
            self.config.retry,
            share.delivery_limit,
            member.lock_s,
            stopped or member.stopping.is_set(),
        )
        where = f"{record.record} (delivery {record.delivery_count} of {share.delivery_limit})"
        failed = f"attempt {attempt} on {where} failed ({type(exc).__name__}: {exc})"
        if after is After.RETRY:
            self.stats.add(retries=1)
            log.warning("%s; retrying in %.3f s", failed, backoff)
            return backoff
        if after is After.RELEASE:
            log.warning("%s; released to the group for another delivery", failed)
            member.finish(Outcome(record, Ack.RELEASE))
            return None
        member.finish(Outcome(record, self.park(record, exc, attempt) or Ack.RELEASE))
        return None

    def park(self, record: ShareRecord, exc: Exception, attempt: int = 1) -> Ack | None:
        """Write the record to the dead-letter topic: the acknowledgement that follows
        (``share.dead_letter_ack``), or None if the topic did not take it (it is released)."""
        raw = record.record
        error = HandlerError(raw.topic, raw.partition, raw.offset, attempt, exc)
        try:
            headers = dead_letter_headers(raw, exc, attempt, self.config.group_id)
            headers.append(("kafleet.delivery.count", str(record.delivery_count).encode()))
            self.dead_letters.send(raw, headers)
        except Exception as dlt_exc:  # noqa: BLE001 - cannot park it: release it, nothing lost
            log.error("%s; dead-lettering failed too (%s): released", error, dlt_exc)
            return None
        log.error("%s; sent to %s", error, self.dead_letters.topic)
        self.stats.add(dead_lettered=1)
        self.counts.add(dead_lettered=1)
        return Ack.REJECT if self.config.share.dead_letter_ack == "reject" else Ack.ACCEPT


async def _backoff(delay: float, member: Member) -> bool:
    """Sleep ``delay`` seconds; False as soon as the member stops."""
    deadline = time.monotonic() + delay
    while (left := deadline - time.monotonic()) > 0:
        if member.stopping.is_set():
            return False
        await asyncio.sleep(min(left, STOP_CHECK_S))
    return not member.stopping.is_set()
