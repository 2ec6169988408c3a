"""The Poller: the only thread that touches the Kafka consumer.

Owns: the ``confluent_kafka.Consumer`` and its loop: ``consume`` at a short, fixed cadence
whatever the handlers do (so ``max.poll.interval.ms`` never expires because of slow work),
reading what the client holds into the intake and handing at most ``max_poll_records`` per
poll to the queues, fairly across partitions (``intake.py``, KIP-41); ``pause``/``resume`` as
the queues report; at most once, holding a poll's records until a commit covering them is
acknowledged; restarting a partition's tracking when its offsets go back (a log truncation or
an offset reset); librdkafka's statistics (log ends for lag) and errors; and an orderly close.

Does not own committing (``commits.py``), the rebalance callbacks (``rebalance.py``, run
inside ``consume`` on this thread), running handlers (``executor.py``) or the wiring
(``consumer.py``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from kafleet.commits import Committer
from kafleet.config import ConsumerConfig
from kafleet.errors import KafkaClientError
from kafleet.intake import Intake
from kafleet.offsets import OffsetTracker
from kafleet.partition_state import TP
from kafleet.rebalance import OffsetStore, Rebalance, ResultShipper
from kafleet.record import Record
from kafleet.state import Stats
from kafleet.work_queue import WorkQueues

log = logging.getLogger(__name__)

# How far the Poller reads ahead of what it hands over, for the fair take: a few polls' worth,
# and at least about one hot partition's fetched batch (256 KB of 100-byte records).
FAIR_DEPTH_POLLS = 4
MIN_FAIR_DEPTH = 2_000


class Poller:
    def __init__(
        self,
        config: ConsumerConfig,
        queues: WorkQueues,
        offsets: OffsetTracker,
        stats: Stats,
        offset_store: OffsetStore | None = None,
        consumer_factory: Callable[[dict[str, object]], Consumer] = Consumer,
        shipper: ResultShipper | None = None,
        handler_p99: Callable[[], float | None] = lambda: None,
    ) -> None:
        self.config = config
        self.queues = queues
        self.offsets = offsets
        self.stats = stats
        self.offset_store = offset_store
        self.shipper = shipper
        self.max_poll_records = config.max_poll_records  # tunable live: a plain int write
        self._consumer_factory = consumer_factory
        self._consumer: Consumer | None = None
        self.assigned: set[TP] = set()
        self.drain_deadline: float | None = None
        self.closing = False
        self.stopped = threading.Event()
        self.error: BaseException | None = None
        self.joined = False  # an assignment (maybe empty) arrived: the worker is in the group
        # From librdkafka's statistics: per partition, the log-end offset and fetch position.
        self.log_ends: dict[TP, tuple[int, int]] = {}
        self.intake = Intake()  # fetched, not yet handed over: the fair take (KIP-41)
        self.committer = Committer(offsets, stats, config.commit_interval_ms / 1000)
        self.rebalance = Rebalance(self, handler_p99)
        # At most once: a poll's records wait here, their partitions paused, until a commit
        # covering them is acknowledged; no handler runs before that.
        self._unacknowledged: list[Record] = []

    # -- control from other threads ---------------------------------------------------------

    def request_stop(self, grace_s: float) -> None:
        """Stop taking records and drain for up to ``grace_s``, then commit and close."""
        deadline = time.monotonic() + grace_s
        if self.drain_deadline is None or deadline < self.drain_deadline:
            self.drain_deadline = deadline

    @property
    def assignment(self) -> list[TP]:
        return sorted(self.assigned)

    @property
    def holding(self) -> bool:
        """At most once: records wait for their commit, every partition paused."""
        return bool(self._unacknowledged)

    # -- the thread -------------------------------------------------------------------------

    def run(self) -> None:
        try:
            self._consumer = self._consumer_factory(
                {
                    **self.config.librdkafka(),
                    "on_commit": self.committer.on_commit,
                    "error_cb": self._on_error,
                    "stats_cb": self._on_statistics,
                }
            )
            self.committer.consumer = self._consumer
            self._subscribe()
            while not self._drained():
                self._poll_once()
            self._close()
        except BaseException as exc:
            log.exception("the poller stopped on an error")
            self.error = exc
            self.stats.fatal_error = f"{type(exc).__name__}: {exc}"
            self._close(commit=False)
        finally:
            self.stopped.set()

    def _subscribe(self) -> None:
        assert self._consumer is not None
        topics = list(self.config.topics)
        if self.config.topic_pattern:
            pattern = self.config.topic_pattern
            topics = [pattern if pattern.startswith("^") else "^" + pattern]
        self._consumer.subscribe(
            topics,
            on_assign=self.rebalance.on_assign,
            on_revoke=self.rebalance.on_revoke,
            on_lost=self.rebalance.on_lost,
        )

    def _drained(self) -> bool:
        if self.drain_deadline is None:
            return False
        if not self.closing:
            self.closing = True
            self._pause(self.assignment)  # stop intake; keep polling so we stay in the group
            if self.shipper is not None:
                self.shipper.close_intake()
        idle = self.queues.wait_all_idle(timeout=0) and (
            self.shipper is None or self.shipper.settled()
        )
        return idle or time.monotonic() >= self.drain_deadline

    def _poll_once(self) -> None:
        assert self._consumer is not None
        if self._unacknowledged:  # at most once: retry the commit the waiting records need
            self._release_acknowledged()
        headroom = min(self.max_poll_records, self.config.queue.max_records // 2)
        pause, resume = self.queues.transitions(headroom, self.intake.counts())
        if not self.closing and not self._unacknowledged:  # holding: all paused at the client
            self._pause(pause)
            self._resume(resume)
        timeout = self.config.poll_interval_ms / 1000
        rooms = self.queues.rooms()
        if self.closing:  # everything is paused: poll only to stay in the group
            messages = self._consumer.consume(num_messages=1, timeout=timeout)
        else:
            # Read past a hot partition's batch at the head of the client's queue, so that the
            # fair take below sees every partition's records: a few polls' worth ahead, within
            # the room the unpaused queues have left (what waits counts towards the pause, so
            # a partition never holds more than its bound and one fetch). Reading everything
            # the client holds paused partitions over and over and cost 2.7 times the rate
            # (B1). consume(n, t) waits until it has n messages or t passed: take what is
            # there now, and when nothing is and nothing waits, wait for the first record.
            want = self._fetch_size(rooms)
            messages = self._consumer.consume(num_messages=want, timeout=0)
            if not messages and not self.intake.any_for(rooms):  # nothing to hand over: wait
                messages = self._consumer.consume(num_messages=1, timeout=timeout)
        self.stats.polled()
        if messages:
            self.intake.stage(self._records(messages))
        if self._unacknowledged:
            return  # no periodic commit either: it would cover the records that wait
        if len(self.intake) and not self.closing:
            # The rooms read before consume(): the queues have only drained since.
            self._hand_over(self.intake.take(self.max_poll_records, rooms))
        self.committer.maybe_commit()

    def _fetch_size(self, rooms: dict[TP, int]) -> int:
        room = sum(r for tp, r in rooms.items() if not self.queues.is_paused(tp))
        depth = max(MIN_FAIR_DEPTH, FAIR_DEPTH_POLLS * self.max_poll_records)
        return max(1, min(room, depth) - len(self.intake))

    def _records(self, messages: list[Message]) -> list[Record]:
        records = []
        for msg in messages:
            err = msg.error()
            if err is not None:
                self._on_error(err)
                continue
            record = Record.from_message(msg)
            if record.tp in self.assigned:
                records.append(record)
        return records

    def _hand_over(self, records: list[Record]) -> None:
        if not records:
            return
        records = self._rewind_where_offsets_went_back(records)
        self.offsets.add_many([(record.tp, record.offset) for record in records])
        if self.config.guarantee == "at-most-once" and records:
            # Committed before any handler runs: done as far as offsets are concerned, and
            # handed over only once the commit that covers them is acknowledged.
            self.offsets.done_many([(record.tp, record.offset) for record in records])
            if self._unacknowledged or not self.committer.commit(asynchronous=False):
                if not self._unacknowledged:
                    self._hold_intake()
                self._unacknowledged.extend(records)
                return
        self.queues.push(records)

    # -- at most once: no handler before its commit -------------------------------------------

    def _hold_intake(self) -> None:
        """A commit failed: pause every partition at the client (kafleet's own pause marks are
        left as they are) and keep polling, so the group sees us alive, until it succeeds."""
        assert self._consumer is not None
        log.warning("at-most-once: a commit failed; no record is handled until one succeeds")
        self._consumer.pause([TopicPartition(t, p) for t, p in self.assigned])

    def _release_acknowledged(self) -> None:
        """Retry the commit that covers the waiting records; once it is acknowledged, hand
        them over and resume what kafleet itself has not paused."""
        assert self._consumer is not None
        if not self.committer.commit(asynchronous=False):
            return
        records, self._unacknowledged = self._unacknowledged, []
        self.queues.push([r for r in records if r.tp in self.assigned])
        self._end_hold()
        log.info("at-most-once: commit acknowledged; %d waiting records handed over", len(records))

    def _end_hold(self) -> None:
        """Resume at the client what kafleet's own bookkeeping has not paused."""
        if self._consumer is not None and not self.closing:
            unpaused = [tp for tp in self.assigned if not self.queues.is_paused(tp)]
            self._consumer.resume([TopicPartition(t, p) for t, p in unpaused])

    def drop_unacknowledged(self, tps: list[TP]) -> dict[TP, int]:
        """Revoked or lost partitions' waiting records never ran: forget them, so that no
        commit covers them and the next owner reads them again. Returns each partition's
        first such offset. Ends the hold if nothing else waits."""
        if not self._unacknowledged:
            return {}
        gone = set(tps)
        first: dict[TP, int] = {}
        kept = []
        for record in self._unacknowledged:
            if record.tp in gone:
                first.setdefault(record.tp, record.offset)
            else:
                kept.append(record)
        self._unacknowledged = kept
        for tp, offset in first.items():
            self.offsets.truncate(tp, offset)
        if not kept:
            self._end_hold()
        return first

    # -- offsets that go back -----------------------------------------------------------------

    def _rewind_where_offsets_went_back(self, records: list[Record]) -> list[Record]:
        """librdkafka moves a position back after a log truncation or an offset reset. Such a
        partition's tracking starts again from the new position (records of the old run still
        in handlers finish unseen); loud in the log, counted in ``offset_rewinds``."""
        expected = self.offsets.next_offsets({record.tp for record in records})
        jumps: dict[TP, int] = {}  # partition -> index of its last record that went back
        for index, record in enumerate(records):
            following = expected.get(record.tp)
            if following is not None and record.offset < following:
                jumps[record.tp] = index
                log.error(
                    "%s[%d] went back from offset %d to %d (a log truncation or an offset "
                    "reset): its tracking starts again there, and records may be handled again",
                    record.topic,
                    record.partition,
                    following - 1,
                    record.offset,
                )
            expected[record.tp] = record.offset + 1
        if not jumps:
            return records
        tps = list(jumps)
        paused = [tp for tp in tps if self.queues.is_paused(tp)]  # the client keeps its pause
        if paused and self._consumer is not None and not self._unacknowledged:
            self._consumer.resume([TopicPartition(*tp) for tp in paused])
        self.queues.close_partitions(tps)
        self.queues.remove(tps)
        self.queues.assign(tps)
        for tp in tps:
            self.offsets.remove(tp)
            self.offsets.assign(tp)
        if self.shipper is not None:
            self.shipper.remove(tps)
            self.shipper.assign(tps)
        self.stats.add(offset_rewinds=len(tps))
        return [r for i, r in enumerate(records) if i >= jumps.get(r.tp, 0)]

    def _on_statistics(self, raw: str) -> None:
        """librdkafka's statistics: keep each assigned partition's log end and position."""
        try:
            topics = json.loads(raw).get("topics", {})
        except ValueError:
            return
        ends: dict[TP, tuple[int, int]] = {}
        for topic, info in topics.items():
            for number, part in info.get("partitions", {}).items():
                tp = (topic, int(number))
                if tp in self.assigned and part.get("hi_offset", -1) >= 0:
                    ends[tp] = (int(part["hi_offset"]), int(part.get("app_offset", -1)))
        self.log_ends = ends

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            raise KafkaClientError(err, "the consumer hit a fatal error")
        if err.code() != KafkaError._PARTITION_EOF:
            log.warning("kafka: %s", err)  # transient (broker down, ...); librdkafka retries

    # -- pause / resume -----------------------------------------------------------------------

    def _pause(self, tps: list[TP]) -> None:
        if tps and self._consumer is not None:
            self.stats.add(pauses=len(tps))
            self._consumer.pause([TopicPartition(t, p) for t, p in tps if (t, p) in self.assigned])

    def _resume(self, tps: list[TP]) -> None:
        if tps and self._consumer is not None:
            self.stats.add(resumes=len(tps))
            self._consumer.resume([TopicPartition(t, p) for t, p in tps if (t, p) in self.assigned])

    # -- close ----------------------------------------------------------------------------------

    def _close(self, commit: bool = True) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is None:
            return
        self._consumer = consumer  # the callbacks that close() runs need it
        self.closing = True
        if self.drain_deadline is None:
            self.drain_deadline = time.monotonic()
        try:
            if commit:
                self.committer.commit(asynchronous=False)
            consumer.close()  # runs the final revoke, leaves the group
        except (KafkaException, RuntimeError) as exc:
            log.warning("closing the consumer: %s", exc)
        finally:
            self._consumer = None
