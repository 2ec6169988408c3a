"""One member of a share group: a Java share consumer and the one thread that owns it.

Owns: the member's loop: poll (at most ``max_poll_records`` records, strictly, with
``record_limit``), hand each record to the handlers' pool, acknowledge each record as its
outcome comes in (only this thread calls the client, as the Java client requires), sent with
the next poll or, once the poll is half a second old, at once (a slow record does not hold
its neighbours' acknowledgements past their locks); write the accepted records' results in
one batch when there is a sink (before they are accepted: at-least-once; retried while the
locks allow; a record on its last delivery is parked rather than released, and one whose
result cannot be a row is parked); poll again once every record of the poll is acknowledged.
A new ``max_poll_records`` is applied between polls by reopening the client (nothing is
acquired then). On a stop: no more polls; records still in handlers when the grace runs out
are released; the acknowledgements are committed and the client closed. The counts: what
was acquired, redelivered, accepted, released, rejected and archived.

Does not own what a failed attempt leads to (``outcomes.py``), running handlers or
dead-lettering (``attempts.py``, ``pool.py``) or the Java calls themselves (``client.py``).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kafleet.engine.record import Record
from kafleet.share.client import Ack, ShareClient, ShareRecord
from kafleet.share.outcomes import last_delivery, margin_s
from kafleet.share.state import ShareCounts
from kafleet.spark.shipping import Backoff

log = logging.getLogger(__name__)
TURN_S = 0.1  # the longest the loop waits for an outcome before looking around
# A poll's acknowledgements made this long after it (at most this share of the lock) are
# sent at once rather than with the next poll: a fast poll pays no request of its own.
FLUSH_AFTER_S = 0.5
FLUSH_SHARE = 0.2


@dataclass
class Outcome:
    record: ShareRecord
    ack: Ack
    result: Any = None  # a successful handler's result, for the sink
    has_result: bool = False


# Write results in one attempt (raising on an outage); the records whose results could not
# become rows come back with why.
WriteResults = Callable[[list[tuple[Record, Any]]], list[tuple[Record, Exception]]]
# Dead-letter a record: the acknowledgement that follows (ACCEPT or REJECT), or None if the
# dead-letter topic did not take it.
Park = Callable[[ShareRecord, Exception], Ack | None]


class Member:
    def __init__(
        self,
        index: int,
        open_client: Callable[[int], ShareClient],
        dispatch: Callable[[ShareRecord, Member], None],
        counts: ShareCounts,
        *,
        max_poll_records: int,
        poll_interval_s: float,
        lock_s: float,
        delivery_limit: int,
        write_results: WriteResults | None = None,
        park: Park | None = None,
        backoff: Backoff | None = None,
        accept_first: bool = False,
    ) -> None:
        """``accept_first``: at-most-once, every record is accepted as it is polled, before
        its handler runs."""
        self.index = index
        self.max_poll_records = max_poll_records  # wanted; applied between polls
        self._open = open_client
        self._dispatch = dispatch
        self.counts = counts
        self.poll_interval_s = poll_interval_s
        self.lock_s = lock_s
        self.delivery_limit = delivery_limit
        self._write_results = write_results
        self._park_with = park
        self._backoff = backoff or Backoff()  # between the sink's attempts
        self._accept_first = accept_first
        self.sink_failing_since: float | None = None  # wall clock of the first failed write
        self.sink_error: str | None = None
        self._outcomes: queue.SimpleQueue[Outcome] = queue.SimpleQueue()
        self._client: ShareClient | None = None
        self._client_lock = threading.Lock()
        self._stop_at: float | None = None  # monotonic: release what is still running then
        self.stopping = threading.Event()
        self.stopped = threading.Event()
        self.error: BaseException | None = None
        self.last_turn = time.monotonic()
        self.joined = False
        self.lock_deadline: float | None = None  # of the records in hand
        self.in_hand: dict[int, tuple[ShareRecord, float]] = {}  # id -> (record, handed at)
        self._refused_seen = 0

    # -- from other threads ---------------------------------------------------------------

    def finish(self, outcome: Outcome) -> None:
        """A handler's outcome for one of this member's records (any thread)."""
        self._outcomes.put(outcome)

    def lock_left_s(self) -> float | None:
        deadline = self.lock_deadline
        return None if deadline is None else deadline - time.monotonic()

    def request_stop(self, grace_s: float) -> None:
        self._stop_at = time.monotonic() + grace_s
        self.stopping.set()
        with self._client_lock:
            if self._client is not None:
                self._client.wakeup()

    def oldest_in_hand_s(self) -> float:
        now = time.monotonic()
        return max((now - since for _, since in list(self.in_hand.values())), default=0.0)

    # -- the owning thread ------------------------------------------------------------------

    def run(self) -> None:
        try:
            client = self._reopen(None)
            opened = self.max_poll_records
            while not self.stopping.is_set():
                self.last_turn = time.monotonic()
                if opened != self.max_poll_records:
                    client = self._reopen(client)
                    opened = self.max_poll_records
                    if self.stopping.is_set():  # the stop's wakeup went to the old client
                        break
                records = client.poll(self.poll_interval_s)
                self.joined = True
                self._note_refusals(client)
                if not records:
                    continue
                self._handle(client, records)
            client.commit(10.0)
            self._note_refusals(client)
        except BaseException as exc:  # noqa: BLE001 - reported by the consumer, which stops
            self.error = exc
            log.error("share consumer %d stopped on an error: %s", self.index, exc)
        finally:
            with self._client_lock:
                client_now, self._client = self._client, None
            if client_now is not None:
                try:
                    client_now.close()
                except Exception as exc:  # noqa: BLE001 - closing after a failure
                    log.warning("closing share consumer %d: %s", self.index, exc)
            self.stopped.set()

    def _reopen(self, client: ShareClient | None) -> ShareClient:
        if client is not None:
            client.commit(10.0)
            client.close()
            log.info(
                "share consumer %d: max_poll_records now %d", self.index, self.max_poll_records
            )
        fresh = self._open(self.max_poll_records)
        with self._client_lock:
            self._client = fresh
        return fresh

    def _handle(self, client: ShareClient, records: list[ShareRecord]) -> None:
        """Hand a poll's records to the handlers and acknowledge each as its outcome comes in
        (sent each turn, so a slow record does not hold its neighbours' acknowledgements past
        their locks); the results for a sink are written, then accepted, once all are in."""
        now = time.monotonic()
        lock_ms = client.lock_ms()
        self.lock_deadline = now + (lock_ms / 1000 if lock_ms else self.lock_s)
        self.counts.polled(records)
        for record in records:
            self.in_hand[id(record)] = (record, now)
        if self._accept_first:  # at-most-once: done for the group before its handler runs
            for record in records:
                self._acknowledge(client, Outcome(record, Ack.ACCEPT))
            client.commit(10.0)
        for record in records:
            self._dispatch(record, self)
        held: list[Outcome] = []  # accepted, with results the sink must write first
        # Acknowledgements ride the next poll, unless the poll's last records are slow: then
        # they go at once, so the fast ones are not held past their locks.
        flush_at = now + min(FLUSH_AFTER_S, FLUSH_SHARE * self.lock_s)
        sent = 0
        while self.in_hand:
            self.last_turn = time.monotonic()
            if sent and self.last_turn >= flush_at:
                client.commit_async()
                sent = 0
            try:
                outcome = self._outcomes.get(timeout=TURN_S)
            except queue.Empty:
                if self._stop_at is not None and time.monotonic() > self._stop_at:
                    for record, _ in list(self.in_hand.values()):  # their ends are ignored
                        self._acknowledge(client, Outcome(record, Ack.RELEASE))
                    self.in_hand.clear()
                continue
            if self.in_hand.pop(id(outcome.record), None) is None or self._accept_first:
                continue  # released at the end of the grace already, or accepted at the poll
            if outcome.has_result and self._write_results is not None:
                held.append(outcome)
                continue
            self._acknowledge(client, outcome)
            sent += 1
        if held:
            self._write(client, held)
        self.lock_deadline = None

    def _write(self, client: ShareClient, held: list[Outcome]) -> None:
        """Write the results (at-least-once: before their records are accepted), retrying
        while the locks allow. A record whose result cannot be a row is parked (dead-lettered)
        and the rest written; if the sink stays down, the records are released to be done
        again, except on their last delivery, where a release would let the broker archive
        them: those are parked."""
        assert self._write_results is not None
        attempt = 0
        while True:
            attempt += 1
            self.last_turn = time.monotonic()
            try:
                refused = self._write_results([(o.record.record, o.result) for o in held])
            except Exception as exc:  # noqa: BLE001 - the sink's outage: retried in the lock
                self.sink_failing_since = self.sink_failing_since or time.time()
                self.sink_error = str(exc)
                wait = self._backoff.after(attempt)
                left = self.lock_left_s()
                if left is not None and wait + margin_s(self.lock_s) < left:
                    log.warning("the sink failed (%s); retrying in %.2f s", exc, wait)
                    self._sleep(wait)
                    continue
                log.error(
                    "the sink could not write %d results within their lock: %s", len(held), exc
                )
                for outcome in held:
                    if last_delivery(outcome.record.delivery_count, self.delivery_limit):
                        self._acknowledge(client, self._park(outcome.record, exc))
                    else:
                        self._acknowledge(client, Outcome(outcome.record, Ack.RELEASE))
                return
            self.sink_failing_since, self.sink_error = None, None
            bad = {id(record): exc for record, exc in refused}
            for outcome in held:
                why = bad.get(id(outcome.record.record))
                if why is None:
                    self._acknowledge(client, outcome)
                else:
                    self._acknowledge(client, self._park(outcome.record, why))
            return

    def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self.last_turn = time.monotonic()
            time.sleep(min(left, TURN_S))

    def _acknowledge(self, client: ShareClient, outcome: Outcome) -> None:
        client.acknowledge(outcome.record, outcome.ack)
        deadline = self.lock_deadline
        expired = deadline is not None and time.monotonic() > deadline
        if expired and last_delivery(outcome.record.delivery_count, self.delivery_limit):
            self.counts.add(archived=1)  # its lock ran out on its last delivery: archived
            log.error(
                "%s outlived its lock on its last delivery (%d of %d): the broker archived it",
                outcome.record.record,
                outcome.record.delivery_count,
                self.delivery_limit,
            )
        elif outcome.ack is Ack.ACCEPT:
            self.counts.add(accepted=1)
        elif outcome.ack is Ack.REJECT:
            self.counts.add(rejected=1)
        else:
            self.counts.add(released=1)
            if last_delivery(outcome.record.delivery_count, self.delivery_limit):
                self.counts.add(archived=1)
                log.error(
                    "%s released on its last delivery (%d of %d): the broker archives it",
                    outcome.record.record,
                    outcome.record.delivery_count,
                    self.delivery_limit,
                )

    def _park(self, record: ShareRecord, exc: Exception) -> Outcome:
        ack = self._park_with(record, exc) if self._park_with is not None else None
        return Outcome(record, ack or Ack.RELEASE)

    def _note_refusals(self, client: ShareClient) -> None:
        refused = client.refused
        if refused > self._refused_seen:
            self.counts.add(acks_refused=refused - self._refused_seen)
            log.warning(
                "share consumer %d: the broker refused %d acknowledgements (%s): their locks "
                "had run out, so those records go to another delivery",
                self.index,
                refused - self._refused_seen,
                client.last_refusal,
            )
            self._refused_seen = refused
