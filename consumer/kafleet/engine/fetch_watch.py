"""The watch over fetching: finding the assigned partitions that stopped fetching, and restarting
their fetch without restarting the process (librdkafka#5586; the rule is ``fetch_stalls.py``'s).

Owns, on the Poller's thread (the only one that touches the client): per assigned partition,
when it last flowed and the offset kafleet expects from it next (after the last record
``consume()`` returned); the latest reading of librdkafka's statistics (``statistics.py``);
asking the broker for the log end of a partition quiet for half the bound with no lag known
(librdkafka's own log end comes with fetch responses, so it stops moving when the fetcher
does): one partition per poll, each at most once per half bound, none for half a bound after
a question fails, each question holding the Poller up to twice ``QUERY_TIMEOUT_S``; the episodes of
stalls, their restarts, the counters (``fetch_stalls``, ``fetch_restarts``,
``fetch_stalls_recovered``) and the stalled partitions in the state (``snapshot``), which
``/readyz``, ``/healthz`` and ``/metrics`` read.

The restart, from librdkafka's source (2.16):
- ``resume()`` first, always: an application's pause survives unassign and assign (the
  removal, ``rd_kafka_assignment_serve_removals``, and the start,
  ``rd_kafka_assignment_serve_pending``, reset only the library's pause flag), so a pause made
  behind kafleet's back would outlive any restart; only ``resume()`` clears it, and it is
  harmless on a partition that is not paused (``rd_kafka_toppar_pause_resume``: "not paused
  by application"). kafleet never restarts a partition it paused itself, so its own pause
  marks stay true.
- ``seek()`` to the offset kafleet expects next, when the fetcher was started
  (``rd_kafka_toppar_seek``): it stops a pending offset query
  (``RD_KAFKA_TOPPAR_FETCH_OFFSET_QUERY``), bumps the partition's op version so that a lookup
  still awaited (``RD_KAFKA_TOPPAR_FETCH_OFFSET_WAIT``) is ignored when it answers, and
  fetches from that absolute offset at once. No group traffic; the same assignment.
- Otherwise, and when a seek did not help within the bound: ``incremental_unassign`` and
  ``incremental_assign`` of that partition alone, at the offset kafleet expects next. A
  partition stuck on the assignment's ``.queried`` list (#5586) was never started, and a seek
  answers ``_STATE`` there; the removal takes it off that list, and an absolute offset starts
  the fetcher with no OffsetFetch at all (the request that went wrong). With no offset known
  (no record since the assignment) it is assigned as the rebalance assigns it (the committed
  offset, or for exactly-once the sink's: ``Rebalance.resume_points``). Only the local
  assignment changes: no callback runs and the coordinator is told nothing (classic
  cooperative and KIP-848 both take incremental calls outside a rebalance,
  ``rd_kafka_cgrp_handle_assign_op``; KIP-848's heartbeat reports the group's assignment, not
  this local one); the other partitions keep fetching. The partitions due in one check go in
  one call: while one OffsetFetch is outstanding no other partition starts. The one risk:
  should the group enqueue a rebalance in the milliseconds between the ``consume()`` that
  served the last callback and this call, librdkafka would take the call for the
  application's answer to it. So a restart comes right after a ``consume()``: never in a check
  that asked the broker, and the start points of a re-assignment (which may block: a sink's
  log, a committed offset) are found in one check and used in the next.

Does not own: the rule of what stalls and when to act (``fetch_stalls.py``), polling, pausing
or the rebalance callbacks (``poller.py``, ``rebalance.py``), judging health (``assessment.py``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from kafleet.config.model import ConsumerConfig
from kafleet.engine import fetch_stalls
from kafleet.engine.fetch_stalls import TP, Action, Episode, Facts
from kafleet.engine.runs import offset_of
from kafleet.engine.statistics import Reading, read_statistics
from kafleet.health.state import Stats

log = logging.getLogger(__name__)

CHECK_EVERY_S = 0.25  # how often the partitions are judged (a poll is about 50 ms)
QUERY_TIMEOUT_S = 1.0  # the longest one question to the broker holds the Poller


@dataclass
class _Partition:
    """What the watch keeps of one assigned partition (monotonic seconds)."""

    assigned_at: float
    flowing_since: float
    expected: int | None = None  # the offset after the last record consume() returned
    last_record: float = -float("inf")
    broker_end: int | None = None  # the broker's answers, for this quiet stretch
    broker_position: int | None = None
    asked: float = -float("inf")
    lagging_since: float | None = None


class FetchWatch:
    """The Poller's watch over fetching: told of assignments, records and statistics; once
    every CHECK_EVERY_S it judges the partitions and restarts the fetch of stalled ones."""

    def __init__(
        self,
        config: ConsumerConfig,
        stats: Stats,
        held: Callable[[TP], bool],
        start_points: Callable[[Consumer, list[TP]], list[TopicPartition]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stats = stats
        self._held = held  # kafleet pauses it, or it is being revoked
        self._start_points = start_points
        self._clock = clock
        bound_ms = config.fetch_stall_timeout_ms
        on = bound_ms > 0 and config.statistics_interval_ms > 0
        self.timeout_ms = max(bound_ms, 2 * config.statistics_interval_ms) if on else 0
        isolation = config.kafka.get("isolation.level", "read_committed")  # librdkafka's default
        self._read_committed = isolation == "read_committed"
        self._earliest = config.auto_offset_reset == "earliest"
        self.readings: dict[TP, Reading] = {}
        self.group_steady = False  # the latest statistics: the member is steady in its group
        self._parts: dict[TP, _Partition] = {}
        self._episodes: dict[TP, Episode] = {}
        self._next_check = 0.0
        self._asking_from = 0.0  # no question to the broker before this (after a failure)
        self._points: dict[TP, int] = {}  # where partitions with no record yet restart
        self._published: tuple[tuple[TP, float, float, int, int, str | None], ...] = ()

    # -- what the Poller tells it ------------------------------------------------------------

    def statistics(self, raw: str, assigned: Iterable[TP]) -> dict[TP, tuple[int, int]]:
        """Keep librdkafka's statistics; return each partition's (high watermark, app offset)."""
        ends, self.readings, self.group_steady = read_statistics(
            raw, assigned, self._read_committed
        )
        return ends

    def assigned(self, tps: Iterable[TP]) -> None:
        now = self._clock()
        for tp in tps:
            self._parts[tp] = _Partition(now, now)
            self._episodes.pop(tp, None)
            self._points.pop(tp, None)

    def forget(self, tps: Iterable[TP]) -> None:
        for tp in tps:
            self._parts.pop(tp, None)
            self._episodes.pop(tp, None)
            self._points.pop(tp, None)

    def saw(self, stretches: Iterable[tuple[TP, list[Message]]]) -> None:
        """Records ``consume()`` returned: their partitions flow."""
        now = self._clock()
        for tp, messages in stretches:
            part = self._parts.get(tp)
            if part is not None:
                part.expected = offset_of(messages[-1]) + 1
                part.last_record = part.flowing_since = now
                part.broker_end = part.broker_position = part.lagging_since = None

    # -- the check, once every CHECK_EVERY_S -------------------------------------------------

    def check(self, consumer: Consumer) -> None:
        now = self._clock()
        if not self.timeout_ms or now < self._next_check:
            return
        self._next_check = now + CHECK_EVERY_S
        timeout_s = self.timeout_ms / 1000
        facts = {tp: self._facts(tp, part, now) for tp, part in self._parts.items()}
        asked = {tp: part.asked for tp, part in self._parts.items()}
        wanted = fetch_stalls.to_ask(facts, now, timeout_s, asked)
        blocked = bool(wanted and now >= self._asking_from)
        if blocked:
            tp = wanted[0]
            self._ask(consumer, tp, facts[tp], now)
            facts[tp] = self._facts(tp, self._parts[tp], now)
        records = {tp: part.last_record for tp, part in self._parts.items()}
        plan = fetch_stalls.settle(self._episodes, facts, records, now, timeout_s)
        for tp in plan.detected:
            part = self._parts[tp]
            log.warning(
                "%s[%d] fetches nothing: %d records behind its log end and no record for "
                "%.1f s (fetch_stall_timeout_ms %d); restarting its fetch (librdkafka#5586)",
                *tp,
                self._episodes[tp].lag,
                now - max(part.assigned_at, part.last_record),
                self.timeout_ms,
            )
        for tp in plan.recovered:
            log.info("%s[%d] fetches again", *tp)
        self.stats.add(fetch_stalls=len(plan.detected), fetch_stalls_recovered=len(plan.recovered))
        # A restart follows a consume() at once, never a question that held the Poller: a
        # rebalance queued meanwhile would take the incremental calls for its answer. Due
        # restarts stay due (fetch_stalls.settle) and are made at the next check.
        if plan.restart and not blocked:
            self._restart(consumer, plan.restart, now)
        self._published = tuple(
            (tp, e.detected_at, max(self._parts[tp].assigned_at, self._parts[tp].last_record),
             e.lag, e.restarts, e.action)
            for tp, e in self._episodes.items()
        )  # fmt: skip

    def _facts(self, tp: TP, part: _Partition, now: float) -> Facts:
        held = self._held(tp)
        if held:  # the clock runs only while kafleet wants the partition to flow
            part.flowing_since = now
            part.broker_end = part.broker_position = part.lagging_since = None
        reading = self.readings.get(tp)
        ends = [reading.end if reading else None, part.broker_end]
        positions = [part.expected, reading.position if reading else None, part.broker_position]
        known_ends = [e for e in ends if e is not None]
        known_positions = [p for p in positions if p is not None]
        fact = Facts(
            part.flowing_since,
            held,
            max(known_ends) if known_ends else None,
            max(known_positions) if known_positions else None,
            reading.unread if reading else 0,
            reading.has_leader if reading else True,
        )
        part.lagging_since = fetch_stalls.lagging_since(part.lagging_since, fact, now)
        return replace(fact, lagging_since=part.lagging_since)

    def _ask(self, consumer: Consumer, tp: TP, fact: Facts, now: float) -> None:
        """The broker's log end of ``tp`` and, when no position is known, its committed
        offset (or where ``auto_offset_reset`` would start). Blocks up to twice QUERY_TIMEOUT_S."""
        part = self._parts[tp]
        part.asked = now
        try:
            marks = consumer.get_watermark_offsets(
                TopicPartition(*tp), timeout=QUERY_TIMEOUT_S, cached=False
            )
            if marks is None:
                raise KafkaException("timed out")
            low, high = marks
            if fact.position is None:
                [committed] = consumer.committed([TopicPartition(*tp)], timeout=QUERY_TIMEOUT_S)
                start = low if self._earliest else high
                part.broker_position = committed.offset if committed.offset >= 0 else start
        except KafkaException as exc:  # the broker is in trouble: no lag is known, ask later
            log.debug("asking for the log end of %s[%d]: %s", *tp, exc)
            self._asking_from = now + self.timeout_ms / 2000
            return
        part.broker_end = high

    def _restart(self, consumer: Consumer, tps: list[TP], now: float) -> None:
        """Restart the fetch of stalled partitions (the module docstring says how and why)."""
        chosen = {
            tp: fetch_stalls.choose_action(
                self._episodes[tp].restarts,
                reading.fetch_state if (reading := self.readings.get(tp)) else None,
                self._parts[tp].expected,
            )
            for tp in tps
        }
        done: list[tuple[TP, Action]] = []
        try:
            consumer.resume([TopicPartition(*tp) for tp in tps])
        except KafkaException as exc:
            log.warning("resuming %s to restart their fetch: %s", tps, exc)
        reassign = [tp for tp, action in chosen.items() if action == "reassign"]
        for tp in [tp for tp, action in chosen.items() if action == "seek"]:
            offset = self._parts[tp].expected
            assert offset is not None  # choose_action seeks only to a known offset
            try:
                consumer.seek(TopicPartition(*tp, offset))
                done.append((tp, "seek"))
            except KafkaException as exc:
                log.warning("seeking %s[%d] to restart its fetch: %s", *tp, exc)
                reassign.append(tp)
        if unknown := [tp for tp in reassign if self._parts[tp].expected is None]:
            missing = [tp for tp in unknown if tp not in self._points]
            if missing:  # found now (it may block), used at the next check
                self._find_points(consumer, missing)
                reassign = [tp for tp in reassign if tp not in missing]
        if reassign:
            points = [
                TopicPartition(*tp, o if (o := self._parts[tp].expected) is not None else
                               self._points.pop(tp))
                for tp in reassign
            ]  # fmt: skip
            try:
                # Only what the client holds can be taken off (librdkafka refuses the rest).
                holds = {(tp.topic, tp.partition) for tp in consumer.assignment()}
                if present := [TopicPartition(*tp) for tp in reassign if tp in holds]:
                    consumer.incremental_unassign(present)
                consumer.incremental_assign(points)
                done += [(tp, "reassign") for tp in reassign]
            except KafkaException as exc:  # tried again after the bound
                log.warning("re-assigning %s to restart their fetch: %s", reassign, exc)
        for tp, action in done:
            part = self._parts[tp]
            part.flowing_since = now
            log.warning("%s[%d]: fetch restarted by %s at offset %s", *tp, action, part.expected)
        fetch_stalls.restarted(self._episodes, done, now)
        self.stats.add(fetch_restarts=len(done))

    def _find_points(self, consumer: Consumer, tps: list[TP]) -> None:
        """Where ``tps`` restart when no record came since their assignment: as a rebalance
        assigns them (the sink's output for exactly-once, else the committed offset), the
        committed offset the broker gave ``_ask`` standing for "the committed" so that the
        re-assignment needs no OffsetFetch (the request #5586 gets wrong). Kept for the next
        check; a failure (a sink or a coordinator in trouble) leaves them for a later one."""
        try:
            points = self._start_points(consumer, tps)
        except Exception as exc:  # noqa: BLE001 - never the Poller's death: tried again later
            log.warning("finding where %s restart their fetch: %s", tps, exc)
            return
        for point in points:
            tp = (point.topic, point.partition)
            known = self._parts[tp].broker_position if tp in self._parts else None
            self._points[tp] = point.offset if point.offset >= 0 or known is None else known

    # -- for the state snapshot (any thread) -------------------------------------------------

    def snapshot(self) -> dict[str, dict[str, object]]:
        """The partitions stalled now, by name, as ``/readyz`` and ``/healthz`` read them."""
        now = self._clock()
        return {
            f"{tp[0]}[{tp[1]}]": {
                "topic": tp[0],
                "partition": tp[1],
                "lag": lag,
                "stalled_s": now - detected,
                "quiet_s": now - quiet_from,
                "restarts": restarts,
                "last_restart": action,
            }
            for tp, detected, quiet_from, lag, restarts, action in self._published
        }
