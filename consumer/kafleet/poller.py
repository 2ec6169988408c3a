"""The Poller: the only thread that touches the Kafka consumer.

Owns: the ``confluent_kafka.Consumer`` and everything done with it: ``consume`` at a short,
fixed cadence whatever the handlers do (so ``max.poll.interval.ms`` never expires because of
slow work), taking at most ``max_poll_records`` per poll and never more than the fullest
unpaused queue can hold; ``pause``/``resume`` as the queues report; periodic asynchronous
commits of what the offset tracker says is done; the rebalance callbacks (they run inside
``consume`` on this thread); and an orderly close.

Rebalances (cooperative-sticky or KIP-848): on revoke, only the revoked partitions stop: their
queued records are dropped, their in-flight records get ``drain_timeout_s`` to finish, their
done offsets are committed synchronously, then they are forgotten. Other partitions' records
keep running on the Executor's threads meanwhile. With a sink, the revoked partitions' done
results are written within the same deadline before the commit. On lost, nothing is
committed. On assign, an ``OffsetStore`` (exactly-once sinks) may say where to start.

Does not own running handlers (``executor.py``) or the wiring (``consumer.py``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from kafleet.config import ConsumerConfig
from kafleet.errors import KafkaClientError
from kafleet.intake import Intake
from kafleet.offsets import OffsetTracker
from kafleet.record import Record
from kafleet.state import Stats
from kafleet.work_queue import TP, WorkQueues

log = logging.getLogger(__name__)

# revoke_policy wait: how long a revoke waits at most, in multiples of the recent p99 handler
# latency (a record that started just before the revoke ends within one p99), and at least.
REVOKE_WAIT_P99S = 3.0
REVOKE_WAIT_FLOOR_S = 0.1
MAX_FETCH = 10_000  # records read from the client in one poll at most


class OffsetStore(Protocol):
    """A sink that stores offsets with its output (exactly-once) says where to resume: for
    each partition it holds output of, the offset after the last record it holds."""

    def stored_offsets(self, partitions: list[TP]) -> dict[TP, int]: ...


class ResultShipper(Protocol):
    """What the Poller asks of the shipper (``shipping.py``) on rebalances and shutdown."""

    def assign(self, tps: Iterable[TP]) -> None: ...

    def drain(self, tps: list[TP], timeout: float) -> bool: ...

    def remove(self, tps: Iterable[TP]) -> None: ...

    def close_intake(self) -> None: ...

    def settled(self) -> bool: ...


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
        self._assigned: set[TP] = set()
        self._drain_deadline: float | None = None
        self._closing = False
        self.stopped = threading.Event()
        self.error: BaseException | None = None
        self.joined = False  # an assignment (maybe empty) arrived: the worker is in the group
        # From librdkafka's statistics: per partition, the log-end offset and fetch position.
        self.log_ends: dict[TP, tuple[int, int]] = {}
        self._commit_sent_at: float | None = None
        self.intake = Intake()  # fetched, not yet handed over: the fair take (KIP-41)
        self._handler_p99 = handler_p99
        # At most once: a poll's records wait here, their partitions paused, until a commit
        # covering them is acknowledged; no handler runs before that.
        self._unacknowledged: list[Record] = []

    # -- control from other threads ---------------------------------------------------------

    def request_stop(self, grace_s: float) -> None:
        """Stop taking records and drain for up to ``grace_s``, then commit and close."""
        deadline = time.monotonic() + grace_s
        if self._drain_deadline is None or deadline < self._drain_deadline:
            self._drain_deadline = deadline

    @property
    def assignment(self) -> list[TP]:
        return sorted(self._assigned)

    # -- the thread -------------------------------------------------------------------------

    def run(self) -> None:
        try:
            self._consumer = self._consumer_factory(
                {
                    **self.config.librdkafka(),
                    "on_commit": self._on_commit,
                    "error_cb": self._on_error,
                    "stats_cb": self._on_statistics,
                }
            )
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
            topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )

    def _drained(self) -> bool:
        if self._drain_deadline is None:
            return False
        if not self._closing:
            self._closing = True
            self._pause(self.assignment)  # stop intake; keep polling so we stay in the group
            if self.shipper is not None:
                self.shipper.close_intake()
        idle = self.queues.wait_all_idle(timeout=0) and (
            self.shipper is None or self.shipper.settled()
        )
        return idle or time.monotonic() >= self._drain_deadline

    def _poll_once(self) -> None:
        assert self._consumer is not None
        if self._unacknowledged:  # at most once: retry the commit the waiting records need
            self._release_acknowledged()
        headroom = min(self.max_poll_records, self.config.queue.max_records // 2)
        pause, resume = self.queues.transitions(headroom, self.intake.counts())
        if not self._closing:
            self._pause(pause)
            self._resume(resume)
        timeout = self.config.poll_interval_ms / 1000
        rooms = self.queues.rooms()
        if self._closing:  # everything is paused: poll only to stay in the group
            messages = self._consumer.consume(num_messages=1, timeout=timeout)
        else:
            # Read past a hot partition's batch at the head of the client's queue, so that the
            # fair take below sees every partition's records: whatever the client holds, within
            # the room the unpaused queues have left (what waits counts towards the pause, so
            # a partition never holds more than its bound and one fetch). consume(n, t) waits
            # until it has n messages or t passed: take what is there now, and when nothing
            # is, wait for the first record only, not for a full batch.
            want = self._fetch_size(rooms)
            messages = self._consumer.consume(num_messages=want, timeout=0)
            if not messages:
                messages = self._consumer.consume(num_messages=1, timeout=timeout)
        self.stats.polled()
        if messages:
            self.intake.stage(self._records(messages))
        if len(self.intake) and not self._closing and not self._unacknowledged:
            self._hand_over(self.intake.take(self.max_poll_records, self.queues.rooms()))
        self._maybe_commit()

    def _fetch_size(self, rooms: dict[TP, int]) -> int:
        room = sum(r for tp, r in rooms.items() if not self.queues.is_paused(tp))
        return max(1, min(MAX_FETCH, room - len(self.intake)))

    def _records(self, messages: list[Message]) -> list[Record]:
        records = []
        for msg in messages:
            err = msg.error()
            if err is not None:
                self._on_error(err)
                continue
            record = Record.from_message(msg)
            if record.tp in self._assigned:
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
            if self._unacknowledged or not self._commit(asynchronous=False):
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
        self._consumer.pause([TopicPartition(t, p) for t, p in self._assigned])

    def _release_acknowledged(self) -> None:
        """Retry the commit that covers the waiting records; once it is acknowledged, hand
        them over and resume what kafleet itself has not paused."""
        assert self._consumer is not None
        if not self._commit(asynchronous=False):
            return
        records, self._unacknowledged = self._unacknowledged, []
        self.queues.push([r for r in records if r.tp in self._assigned])
        if not self._closing:
            unpaused = [tp for tp in self._assigned if not self.queues.is_paused(tp)]
            self._consumer.resume([TopicPartition(t, p) for t, p in unpaused])
        log.info("at-most-once: commit acknowledged; %d waiting records handed over", len(records))

    def _drop_unacknowledged(self, tps: list[TP]) -> None:
        """Revoked or lost partitions' waiting records never ran and are not committed: the
        next owner reads them again. Forget them, so the revoke's commit leaves them out."""
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

    # -- commits ------------------------------------------------------------------------------

    _next_commit: float = 0.0

    def _maybe_commit(self) -> None:
        now = time.monotonic()
        if now >= self._next_commit:
            self._next_commit = now + self.config.commit_interval_ms / 1000
            self._commit(asynchronous=True)

    def _commit(self, partitions: set[TP] | None = None, asynchronous: bool = True) -> bool:
        assert self._consumer is not None
        offsets = self.offsets.to_commit(partitions)
        if not offsets:
            return True
        tps = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
        started = time.monotonic()
        try:
            if asynchronous:
                self._commit_sent_at = started
                self._consumer.commit(offsets=tps, asynchronous=True)
                return True  # the outcome arrives in _on_commit
            result = self._consumer.commit(offsets=tps, asynchronous=False)
            self.stats.observe_commit(time.monotonic() - started)
        except KafkaException as exc:
            self.stats.add(commit_failures=1)
            log.warning("commit of %s failed: %s", offsets, exc)
            return False
        failed = [tp for tp in result if tp.error is not None]
        self.offsets.committed(
            {(tp.topic, tp.partition): tp.offset for tp in result if tp.error is None}
        )
        self.stats.add(commits=1)
        if failed:
            self.stats.add(commit_failures=1)
            log.warning("commit failed for %s", failed)
            return False
        return True

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
                if tp in self._assigned and part.get("hi_offset", -1) >= 0:
                    ends[tp] = (int(part["hi_offset"]), int(part.get("app_offset", -1)))
        self.log_ends = ends

    def _on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        if err is not None:
            self.stats.add(commit_failures=1)
            log.warning("asynchronous commit failed: %s", err)
            return
        self.offsets.committed(
            {(tp.topic, tp.partition): tp.offset for tp in partitions if tp.error is None}
        )
        self.stats.add(commits=1)
        if self._commit_sent_at is not None:
            self.stats.observe_commit(time.monotonic() - self._commit_sent_at)

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            raise KafkaClientError(err, "the consumer hit a fatal error")
        if err.code() != KafkaError._PARTITION_EOF:
            log.warning("kafka: %s", err)  # transient (broker down, ...); librdkafka retries

    # -- pause / resume -----------------------------------------------------------------------

    def _pause(self, tps: list[TP]) -> None:
        if tps and self._consumer is not None:
            self.stats.add(pauses=len(tps))
            self._consumer.pause([TopicPartition(t, p) for t, p in tps if (t, p) in self._assigned])

    def _resume(self, tps: list[TP]) -> None:
        if tps and self._consumer is not None:
            self.stats.add(resumes=len(tps))
            self._consumer.resume(
                [TopicPartition(t, p) for t, p in tps if (t, p) in self._assigned]
            )

    # -- rebalance callbacks (inside consume(), on this thread) --------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        tps = [(tp.topic, tp.partition) for tp in partitions]
        # librdkafka keeps an application's pause across unassign and assign (librdkafka
        # #1849): a partition paused here before it was revoked would come back paused, and
        # nothing would ever resume it. Its bookkeeping starts afresh, unpaused, so resume it.
        if partitions:
            consumer.resume([TopicPartition(t, p) for t, p in tps])
        self.queues.assign(tps)
        for tp in tps:
            self.offsets.assign(tp)
        if self.shipper is not None:
            self.shipper.assign(tps)
        self._assigned.update(tps)
        self.joined = True
        self.stats.add(assigned=len(tps), rebalances=1)
        log.info("assigned %s", tps)
        if self.offset_store is not None and tps:
            consumer.incremental_assign(self._resume_points(consumer, tps))
        if self._closing or self._unacknowledged:
            consumer.pause([TopicPartition(t, p) for t, p in tps])

    def _resume_points(self, consumer: Consumer, tps: list[TP]) -> list[TopicPartition]:
        """Exactly-once: where each partition resumes. The sink's output wins where it is
        ahead of the committed offset (it was written, and the commit after it was not)."""
        assert self.offset_store is not None
        stored = self.offset_store.stored_offsets(tps)
        asked = [TopicPartition(t, p) for t, p in stored]
        committed = {
            (tp.topic, tp.partition): tp.offset
            for tp in (consumer.committed(asked, timeout=30) if asked else [])
        }
        points = []
        for tp in tps:
            offset = stored.get(tp)
            if offset is not None and offset > committed.get(tp, -1):
                log.info("%s[%d] resumes at %d, after the sink's output", *tp, offset)
                points.append(TopicPartition(*tp, offset))
            else:
                points.append(TopicPartition(*tp))  # the committed offset, or the reset policy
        return points

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        started = time.monotonic()
        tps = [
            (tp.topic, tp.partition)
            for tp in partitions
            if (tp.topic, tp.partition) in self._assigned
        ]
        if not tps:
            return
        dropped = self.queues.close_partitions(tps)
        self._drop_unacknowledged(tps)
        wait = self._revoke_wait()
        drained = self.queues.wait_idle(tps, timeout=wait)
        if self.shipper is not None:  # write what is done, so the next owner need not redo it
            remaining = max(0.0, started + wait - time.monotonic())
            drained = self.shipper.drain(tps, remaining) and drained
        committed = self._commit(set(tps), asynchronous=False)
        self._forget(tps)
        seconds = time.monotonic() - started
        self.stats.add(revoked=len(tps), rebalances=1)
        self.stats.observe_revoke(started, seconds, tps, timed_out=not drained)
        log.info(
            "revoked %s in %.3f s (%d queued dropped, waited up to %.3f s, drained: %s, "
            "committed: %s)",
            tps,
            seconds,
            dropped,
            wait,
            drained,
            committed,
        )

    def _revoke_wait(self) -> float:
        """How long a revoke waits for the revoked partitions' in-flight records (librdkafka
        fetches nothing for any partition meanwhile). ``abandon``: not at all; their results
        are ignored when they end (the queues know the run is no longer current). ``wait``:
        up to ``drain_timeout_s``, and no longer than a few times the recent p99 handler
        latency, so one hung record does not hold the whole worker's fetching."""
        deadline = self._drain_deadline
        if self._closing and deadline is not None and time.monotonic() >= deadline:
            return 0.0
        if self.config.effective_revoke_policy == "abandon":
            return 0.0
        p99 = self._handler_p99()
        if p99 is None:
            return self.config.drain_timeout_s
        return min(self.config.drain_timeout_s, max(REVOKE_WAIT_FLOOR_S, REVOKE_WAIT_P99S * p99))

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        tps = [(tp.topic, tp.partition) for tp in partitions]
        self.queues.close_partitions(tps)
        self._drop_unacknowledged(tps)
        self._forget(tps)  # another member owns them now: commit nothing
        self.stats.add(lost=len(tps), rebalances=1)
        log.warning("lost %s; nothing committed for them", tps)

    def _forget(self, tps: list[TP]) -> None:
        self.intake.drop(tps)
        # Resume what kafleet paused: the client keeps the pause flag across unassign and a
        # later assign (see _on_assign), which must not depend on this alone.
        paused = [TopicPartition(t, p) for t, p in tps if self.queues.is_paused((t, p))]
        if paused and self._consumer is not None and not self._closing:
            try:
                self._consumer.resume(paused)
            except KafkaException as exc:
                log.warning("resuming %s as they go: %s", tps, exc)
        for tp in tps:
            self.offsets.remove(tp)
            self._assigned.discard(tp)
        self.queues.remove(tps)
        if self.shipper is not None:
            self.shipper.remove(tps)

    # -- close ----------------------------------------------------------------------------------

    def _close(self, commit: bool = True) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is None:
            return
        self._consumer = consumer  # the callbacks that close() runs need it
        self._closing = True
        if self._drain_deadline is None:
            self._drain_deadline = time.monotonic()
        try:
            if commit:
                self._commit(asynchronous=False)
            consumer.close()  # runs the final revoke, leaves the group
        except (KafkaException, RuntimeError) as exc:
            log.warning("closing the consumer: %s", exc)
        finally:
            self._consumer = None
