"""Committing what is done: periodic asynchronous commits, synchronous ones when they must land.

Owns: sending the offsets the offset tracker says may be committed (``offsets.py``), every
``commit_interval_ms`` asynchronously and on demand synchronously (a revoke, at-most-once
intake, the close), and recording each acknowledgement, so a commit is never sent twice for
the same offset and a failed one is sent again later. Commit latency and failures go to the
stats.

Runs on the Poller's thread only (librdkafka delivers ``on_commit`` inside ``consume``). Does
not own what is done (``offsets.py``) or when a synchronous commit is needed (``poller.py``,
``at_most_once.py``, ``rebalance.py``).
"""

from __future__ import annotations

import logging
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from kafleet.engine.offsets import OffsetTracker
from kafleet.engine.partition_state import TP
from kafleet.health.state import Stats

log = logging.getLogger(__name__)


class Committer:
    def __init__(self, offsets: OffsetTracker, stats: Stats, interval_s: float) -> None:
        self.offsets = offsets
        self.stats = stats
        self.interval_s = interval_s
        self.consumer: Consumer | None = None  # set by the Poller once it has one
        self._next_commit = 0.0
        self._sent_at: float | None = None

    def maybe_commit(self) -> None:
        """An asynchronous commit, once every ``commit_interval_ms``."""
        now = time.monotonic()
        if now >= self._next_commit:
            self._next_commit = now + self.interval_s
            self.commit(asynchronous=True)

    def commit(self, partitions: set[TP] | None = None, asynchronous: bool = True) -> bool:
        """Commit what may be committed (of ``partitions``, or all). Synchronous: True once
        the broker acknowledged every partition; asynchronous: True once sent."""
        assert self.consumer is not None
        offsets = self.offsets.to_commit(partitions)
        if not offsets:
            return True
        tps = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
        started = time.monotonic()
        try:
            if asynchronous:
                self._sent_at = started
                self.consumer.commit(offsets=tps, asynchronous=True)
                return True  # the outcome arrives in on_commit
            result = self.consumer.commit(offsets=tps, asynchronous=False)
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

    def commit_exactly(self, offsets: dict[TP, int]) -> bool:
        """Commit these offsets synchronously as they are, even below what was acknowledged
        (at most once, a revoke gives back the records that never started); True once the
        broker acknowledged them all."""
        assert self.consumer is not None
        if not offsets:
            return True
        started = time.monotonic()
        try:
            result = self.consumer.commit(
                offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                asynchronous=False,
            )
        except KafkaException as exc:
            self.stats.add(commit_failures=1)
            log.warning("commit of %s failed: %s", offsets, exc)
            return False
        self.stats.observe_commit(time.monotonic() - started)
        self.stats.add(commits=1)
        failed = [tp for tp in result if tp.error is not None]
        if failed:
            self.stats.add(commit_failures=1)
            log.warning("commit failed for %s", failed)
        return not failed

    def on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """librdkafka's ``on_commit``: an asynchronous commit's outcome."""
        if err is not None:
            self.stats.add(commit_failures=1)
            log.warning("asynchronous commit failed: %s", err)
            return
        self.offsets.committed(
            {(tp.topic, tp.partition): tp.offset for tp in partitions if tp.error is None}
        )
        self.stats.add(commits=1)
        if self._sent_at is not None:
            self.stats.observe_commit(time.monotonic() - self._sent_at)
