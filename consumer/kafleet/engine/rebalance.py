"""What happens to partitions as they come and go: the rebalance callbacks.

Owns: ``on_assign`` (fresh bookkeeping, the partitions resumed, since librdkafka keeps an
application's pause across unassign and assign (librdkafka #1849); for exactly-once, where each
partition resumes), ``on_revoke`` (only the revoked partitions stop: their queued records are
dropped, their in-flight records waited for as ``revoke_policy`` says, their done results
written and their done offsets committed synchronously, then they are forgotten) and
``on_lost`` (forgotten, nothing committed). Partitions the worker keeps go on running on the
Executor's threads meanwhile, from what their queues hold: while a revoke is pending librdkafka
fetches nothing for any partition.

The callbacks run inside ``consume()`` on the Poller's thread, and act through the Poller's
parts (queues, offsets, intake, committer, the at-most-once hold, shipper, the watch over
fetching). Does not own polling (``poller.py``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol

from confluent_kafka import Consumer, KafkaException, TopicPartition

from kafleet.engine.partition_state import TP

if TYPE_CHECKING:
    from kafleet.engine.poller import Poller

log = logging.getLogger(__name__)

# revoke_policy wait: how long a revoke waits at most, in multiples of the recent p99 handler
# latency (a record that started just before the revoke ends within one p99), and at least.
REVOKE_WAIT_P99S = 3.0
REVOKE_WAIT_FLOOR_S = 0.1


class OffsetStore(Protocol):
    """A sink that stores offsets with its output (exactly-once) says where to resume: for
    each partition it holds output of, the offset after the last record it holds."""

    def stored_offsets(self, partitions: list[TP]) -> dict[TP, int]: ...


class ResultShipper(Protocol):
    """What the Poller asks of the shipper (``shipping.py``) on rebalances and shutdown."""

    def assign(self, tps: Iterable[TP]) -> None: ...

    def drain(self, tps: list[TP], timeout: float) -> bool: ...

    def recent_write_p99(self) -> float | None: ...

    def remove(self, tps: Iterable[TP]) -> None: ...

    def close_intake(self) -> None: ...

    def settled(self) -> bool: ...


class Rebalance:
    def __init__(self, poller: Poller, handler_p99: Callable[[], float | None]) -> None:
        self.poller = poller
        self._handler_p99 = handler_p99

    def on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        p = self.poller
        tps = [(tp.topic, tp.partition) for tp in partitions]
        # librdkafka keeps an application's pause across unassign and assign (librdkafka
        # #1849): a partition paused here before it was revoked would come back paused, and
        # nothing would ever resume it. Its bookkeeping starts afresh, unpaused, so resume it.
        if partitions:
            consumer.resume([TopicPartition(*tp) for tp in tps])
        p.queues.assign(tps)
        for tp in tps:
            p.offsets.assign(tp)
        if p.shipper is not None:
            p.shipper.assign(tps)
        p.assigned.update(tps)
        p.fetch_watch.assigned(tps)
        p.joined = True
        p.stats.add(assigned=len(tps), rebalances=1)
        log.info("assigned %s", tps)
        if p.offset_store is not None and tps:
            points = self.resume_points(consumer, tps)
            for point in points:  # after the sink's output: committed even if no record comes
                if point.offset >= 0:
                    p.offsets.resume((point.topic, point.partition), point.offset)
            consumer.incremental_assign(points)
        if p.closing or p.holding:
            consumer.pause([TopicPartition(*tp) for tp in tps])

    def resume_points(self, consumer: Consumer, tps: list[TP]) -> list[TopicPartition]:
        """Where each partition starts on assignment (or a re-assignment, ``fetch_watch.py``):
        the committed offset (the client finds it); for exactly-once, the sink's output wins
        where it is ahead of the committed offset (it was written, the commit after it not)."""
        p = self.poller
        if p.offset_store is None:
            return [TopicPartition(*tp) for tp in tps]
        stored = p.offset_store.stored_offsets(tps)
        asked = [TopicPartition(*tp) for tp in stored]
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

    def on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        p = self.poller
        started = time.monotonic()
        tps = [
            (tp.topic, tp.partition) for tp in partitions if (tp.topic, tp.partition) in p.assigned
        ]
        if not tps:
            return
        unstarted = p.queues.never_started(tps)
        dropped = p.queues.close_partitions(tps)
        held = p.hold.drop(tps)
        wait = self._revoke_wait(self._handler_p99())
        drained = p.queues.wait_idle(tps, timeout=wait)
        sink_wait = 0.0
        if p.shipper is not None:  # write what is done, so the next owner need not redo it
            sink_wait = self._sink_wait(p.shipper, started)
            drained = p.shipper.drain(tps, sink_wait) and drained
        if p.config.guarantee == "at-most-once":
            rewinds = _unstarted_rewinds(tps, unstarted, held)
            committed = p.committer.commit_exactly(rewinds)
            others = set(tps) - set(rewinds)
            committed = p.committer.commit(others, asynchronous=False) and committed
        else:
            committed = p.committer.commit(set(tps), asynchronous=False)
        self._forget(consumer, tps)
        seconds = time.monotonic() - started
        p.stats.add(revoked=len(tps), rebalances=1)
        p.stats.observe_revoke(started, seconds, tps, timed_out=not drained)
        log.info(
            "revoked %s in %.3f s (%d queued dropped, waited up to %.3f s for handlers and "
            "%.3f s for the sink, drained: %s, committed: %s)",
            tps,
            seconds,
            dropped,
            wait,
            sink_wait,
            drained,
            committed,
        )

    def _revoke_wait(self, p99: float | None) -> float:
        """How long a revoke waits for the revoked partitions' in-flight records (librdkafka
        fetches nothing for any partition meanwhile). ``abandon``: not at all; their results
        are ignored when they end (the queues know the run is no longer current). ``wait``: up
        to ``drain_timeout_s``, and no longer than a few times the recent p99 latency (``p99``:
        the handler's; the sink's writes, ``_sink_wait``), so one hung record does not hold
        the whole worker's fetching."""
        p = self.poller
        if p.config.effective_revoke_policy == "abandon":
            return 0.0
        wait = p.config.drain_timeout_s
        if p99 is not None:
            wait = min(wait, max(REVOKE_WAIT_FLOOR_S, REVOKE_WAIT_P99S * p99))
        return self._within_grace(wait)

    def _sink_wait(self, shipper: ResultShipper, started: float) -> float:
        """How long a revoke then waits for the revoked partitions' sink writes (those under
        way, and those of their done results it starts now). Exactly once: whatever
        ``revoke_policy`` says (it concerns the handlers), as a write that lands after the
        revoke returns lands beside the next owner's rewrite of the same offsets and Delta
        fails one of them; a write on a loaded machine may take many times the recent ones.
        Otherwise as the handlers' wait, by the sink's recent p99 write time. Either way the
        whole revoke waits no longer than ``drain_timeout_s`` (which the configuration keeps
        under half of ``max_poll_interval_ms``)."""
        p = self.poller
        left = p.config.drain_timeout_s - (time.monotonic() - started)
        if p.config.guarantee == "exactly-once":
            return self._within_grace(left)
        return min(self._revoke_wait(shipper.recent_write_p99()), max(0.0, left))

    def _within_grace(self, wait: float) -> float:
        """``wait``, within what is left of a stop's grace once a stop was asked for (a revoke
        served by the poll that was under way when it came included)."""
        deadline = self.poller.drain_deadline
        if deadline is not None:
            wait = min(wait, deadline - time.monotonic())
        return max(0.0, wait)

    def on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        p = self.poller
        tps = [(tp.topic, tp.partition) for tp in partitions]
        p.queues.close_partitions(tps)
        p.hold.drop(tps)
        self._forget(consumer, tps)  # another member owns them now: commit nothing
        p.joined = False  # out of the group (its session expired) until the next assignment
        p.stats.add(lost=len(tps), rebalances=1)
        log.warning("lost %s; nothing committed for them", tps)

    def _forget(self, consumer: Consumer, tps: list[TP]) -> None:
        p = self.poller
        p.intake.drop(tps)
        # Resume what kafleet paused: the client keeps the pause flag across unassign and a
        # later assign (see _on_assign), which must not depend on this alone.
        paused = [TopicPartition(*tp) for tp in tps if p.queues.is_paused(tp)]
        if paused and not p.closing:
            try:
                consumer.resume(paused)
            except KafkaException as exc:
                log.warning("resuming %s as they go: %s", tps, exc)
        for tp in tps:
            p.offsets.remove(tp)
            p.assigned.discard(tp)
        p.fetch_watch.forget(tps)
        p.queues.remove(tps)
        if p.shipper is not None:
            p.shipper.remove(tps)


def _unstarted_rewinds(
    tps: list[TP], unstarted: dict[TP, tuple[int | None, int]], held: dict[TP, int]
) -> dict[TP, int]:
    """At most once, the records queued or waiting for their commit never started, although
    the commit covered them: give them back to the next owner by committing the first of them,
    but never below a record that started (that would run it twice). With ordering by key or
    none, records below a started one that never started are skipped (logged)."""
    rewinds = {}
    for tp in tps:
        queued, highest_taken = unstarted.get(tp, (None, -1))
        firsts = [offset for offset in (queued, held.get(tp)) if offset is not None]
        if not firsts:
            continue
        point = max(min(firsts), highest_taken + 1)
        if point > min(firsts):
            log.warning(
                "%s[%d]: records from offset %d that never started are skipped (at most once: "
                "offset %d above them started already)",
                *tp,
                min(firsts),
                highest_taken,
            )
        rewinds[tp] = point
    return rewinds
