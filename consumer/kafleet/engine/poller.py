"""The Poller: the only thread that touches the Kafka consumer.

Owns: the ``confluent_kafka.Consumer`` and its loop: ``consume`` at a short, fixed cadence
whatever the handlers do (so ``max.poll.interval.ms`` never expires because of slow work),
reading what the client holds into the intake and handing at most ``max_poll_records`` per
poll to the queues, fairly across partitions (``intake.py``, KIP-41); ``pause``/``resume`` as
the queues report; restarting a partition's tracking when its offsets go back (a log truncation
or an offset reset, found by ``intake.py``); librdkafka's statistics (log ends for lag) and
errors; driving the watch over fetching (``fetch_watch.py``: partitions that stopped fetching,
librdkafka#5586); and an orderly close.

Does not own committing (``commits.py``), holding a poll's records until a commit covering them
is acknowledged (at most once, ``at_most_once.py``), the rebalance callbacks (``rebalance.py``,
run inside ``consume`` on this thread), running handlers (``executor.py``) or the wiring
(``consumer.py``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from kafleet.config.model import ConsumerConfig
from kafleet.engine import static_rejoin
from kafleet.engine.at_most_once import Hold
from kafleet.engine.commits import Committer
from kafleet.engine.fetch_watch import FetchWatch
from kafleet.engine.intake import Intake, assigned_stretches, trim_rewinds
from kafleet.engine.offsets import OffsetTracker
from kafleet.engine.partition_state import TP
from kafleet.engine.rebalance import OffsetStore, Rebalance, ResultShipper
from kafleet.engine.runs import Chunk, offset_of
from kafleet.engine.work_queue import WorkQueues
from kafleet.errors import KafkaClientError
from kafleet.health.state import Stats

log = logging.getLogger(__name__)


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
        self.hold = Hold(self)  # at most once: a poll's records wait for their commit
        self.fetch_watch = FetchWatch(config, stats, self._held, self.rebalance.resume_points)

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
        return bool(self.hold.waiting)

    # -- the thread -------------------------------------------------------------------------

    def run(self) -> None:
        try:
            self._start_client()
            while not self._drained():
                try:
                    self._poll_once()
                except KafkaClientError as exc:
                    if self.assigned or not static_rejoin.is_unreleased_instance(exc.kafka_error):
                        raise
                    if not self._join_again(exc):
                        break  # stopped while it waited: nothing was ever assigned
            self._close()
        except BaseException as exc:
            log.exception("the poller stopped on an error")
            self.error = exc
            self.stats.fatal_error = f"{type(exc).__name__}: {exc}"
            self._close(commit=False)
        finally:
            self.stopped.set()

    def _start_client(self) -> None:
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

    def _join_again(self, exc: KafkaClientError) -> bool:
        """The group refused this member's instance id (``static_rejoin.py``): the client is
        dead; a new one joins after ``RETRY_S``, until the earlier process's session ends.
        False if a stop came meanwhile (no new client then)."""
        log.warning(
            "%s; joining again in %.0f s: the group frees group_instance_id %r when the "
            "session of the process that held it before times out",
            exc,
            static_rejoin.RETRY_S,
            self.config.group_instance_id,
        )
        consumer, self._consumer = self._consumer, None
        self.joined = False
        try:
            if consumer is not None:
                consumer.close()
        except (KafkaException, KafkaClientError, RuntimeError) as closing:
            log.debug("closing the refused client: %s", closing)
        deadline = time.monotonic() + static_rejoin.RETRY_S
        while time.monotonic() < deadline and self.drain_deadline is None:
            time.sleep(0.1)
        if self.drain_deadline is not None:
            return False
        self._start_client()
        return True

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
        if self.hold.waiting:  # at most once: retry the commit the waiting records need
            self.hold.release_acknowledged()
        headroom = min(self.max_poll_records, self.config.queue.max_records // 2)
        survey = self.queues.survey(headroom, self.intake.counts())
        if not self.closing and not self.hold.waiting:  # holding: all paused at the client
            self._pause(survey.pause)
            self._resume(survey.resume)
        timeout = self.config.poll_interval_ms / 1000
        rooms = survey.rooms
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
            want = self.intake.read_ahead(survey.open_room, self.max_poll_records)
            messages = self._consumer.consume(num_messages=want, timeout=0)
            if not messages and not self.intake.any_for(rooms):  # nothing to hand over: wait
                messages = self._consumer.consume(num_messages=1, timeout=timeout)
        self.stats.polled()
        if messages:
            stretches = assigned_stretches(messages, self.assigned, self._on_error)
            self.fetch_watch.saw(stretches)
            self.intake.stage(stretches)
        self.fetch_watch.check(self._consumer)
        if self.hold.waiting:
            return  # no periodic commit either: it would cover the records that wait
        if len(self.intake) and not self.closing:
            # The rooms read before consume(): the queues have only drained since.
            self._hand_over(self.intake.take(self.max_poll_records, rooms))
        self.committer.maybe_commit()

    def _hand_over(self, taken: list[tuple[TP, list[Message], int]]) -> None:
        if not taken:
            return
        taken = self._rewind_where_offsets_went_back(taken)
        starts = self.offsets.add_many(
            [(tp, offset_of(m[0]), offset_of(m[-1]), len(m)) for tp, m, _ in taken]
        )
        chunks = [
            Chunk(tp, start, messages, size)
            for (tp, messages, size), start in zip(taken, starts, strict=True)
        ]
        if self.config.guarantee == "at-most-once" and not self.hold.admit(chunks):
            return  # they wait for their commit (at_most_once.py)
        self.queues.push(chunks)

    # -- offsets that go back -----------------------------------------------------------------

    def _rewind_where_offsets_went_back(
        self, taken: list[tuple[TP, list[Message], int]]
    ) -> list[tuple[TP, list[Message], int]]:
        """librdkafka moves a position back after a log truncation or an offset reset
        (``intake.trim_rewinds`` finds where). Such a partition's tracking starts again from
        the new position (records of the old run still in handlers finish unseen); loud in
        the log, counted in ``offset_rewinds``."""
        expected = self.offsets.next_offsets({tp for tp, _, _ in taken})
        result, jumps = trim_rewinds(taken, expected)
        if not jumps:
            return result
        for tp, offset in jumps.items():
            log.error(
                "%s[%d] went back to offset %d (a log truncation or an offset reset): "
                "its tracking starts again there, and records may be handled again",
                *tp,
                offset,
            )
        tps = list(jumps)
        paused = [tp for tp in tps if self.queues.is_paused(tp)]  # the client keeps its pause
        if paused and self._consumer is not None and not self.hold.waiting:
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
        return result

    def _on_statistics(self, raw: str) -> None:
        """librdkafka's statistics: each assigned partition's log end and position; and, for a
        member back in its group with no partition (KIP-848 calls no ``on_assign`` when a
        rejoin brings the same empty assignment), that it is in its group again."""
        self.log_ends = self.fetch_watch.statistics(raw, self.assigned)
        if self.fetch_watch.group_steady and not self.joined and not self.closing:
            self.joined = True

    def _held(self, tp: TP) -> bool:
        """Whether kafleet itself keeps ``tp`` from flowing (paused, stopping, revoking)."""
        queues = self.queues
        return self.closing or self.holding or queues.is_paused(tp) or not queues.is_open(tp)

    def _on_error(self, err: KafkaError) -> None:
        if static_rejoin.is_fatal(err):
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
            partitions = [TopicPartition(t, p) for t, p in tps if (t, p) in self.assigned]
            self._consumer.resume(partitions)
            # librdkafka's fetcher picks a resumed partition up only at its broker thread's next
            # wake-up: up to a second later when that thread has nothing else to fetch
            # (confluent-kafka-go#630; B3, one partition: 1.0 s without a record after each
            # resume). When no other partition is fetching, a seek to the position it resumes
            # from anyway (the offset after the last record consume() returned) starts the
            # fetch at once. Not otherwise: the other fetches wake that thread, and a seek per
            # resume cost B1 (12 partitions) 0.6 of its rate. The check is not per broker (a
            # thread each): with several brokers, a partition whose leader fetches nothing
            # else may still wait.
            resumed = set(tps)
            if any(tp not in resumed and not self.queues.is_paused(tp) for tp in self.assigned):
                return
            try:
                for position in self._consumer.position(partitions):
                    if position.offset >= 0:
                        self._consumer.seek(position)
            except KafkaException as exc:  # only a faster start is lost: the fetch comes anyway
                log.debug("seeking resumed partitions to their positions: %s", exc)

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
