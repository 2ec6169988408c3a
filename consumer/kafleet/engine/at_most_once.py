"""At most once: no handler runs before a commit covering its record is acknowledged.

Owns: with ``guarantee: at-most-once``, a poll's chunks on their way to the queues: marked done
and committed synchronously first, handed over only once that commit is acknowledged. When it
fails they wait here (the hold): every assigned partition is paused at the client (kafleet's
own pause marks are left as they are) while the Poller keeps polling, so the group sees the
worker alive; each poll retries the commit, and once it is acknowledged the waiting records go
to the queues and what kafleet itself has not paused resumes. A revoked or lost partition's
waiting records never ran: they are forgotten, so that no commit covers them.

Runs on the Poller's thread only, acting through its parts (the consumer, committer, queues and
offsets), as the rebalance callbacks do. Does not own committing
(``commits.py``), polling or the queues' pauses (``poller.py``), or what a revoke commits for
the records that never started (``rebalance.py``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from confluent_kafka import TopicPartition

from kafleet.engine.partition_state import TP
from kafleet.engine.runs import Chunk

if TYPE_CHECKING:
    from kafleet.engine.poller import Poller

log = logging.getLogger(__name__)


class Hold:
    def __init__(self, poller: Poller) -> None:
        self.poller = poller
        # A poll's records wait here, their partitions paused, until a commit covering them
        # is acknowledged; no handler runs before that.
        self.waiting: list[Chunk] = []

    def admit(self, chunks: list[Chunk]) -> bool:
        """Commit a poll's chunks before any handler runs (done as far as offsets are
        concerned). True: the commit was acknowledged, hand them over; False: they wait."""
        p = self.poller
        p.offsets.done_many([(c.tp, c.start, c.end, len(c.messages)) for c in chunks])
        if self.waiting or not p.committer.commit(asynchronous=False):
            if not self.waiting:
                self._hold_intake()
            self.waiting.extend(chunks)
            return False
        return True

    def _hold_intake(self) -> None:
        """A commit failed: pause every partition at the client (kafleet's own pause marks are
        left as they are) and keep polling, so the group sees us alive, until it succeeds."""
        p = self.poller
        assert p._consumer is not None
        log.warning("at-most-once: a commit failed; no record is handled until one succeeds")
        p._consumer.pause([TopicPartition(t, n) for t, n in p.assigned])

    def release_acknowledged(self) -> None:
        """Retry the commit that covers the waiting records; once it is acknowledged, hand
        them over and resume what kafleet itself has not paused."""
        p = self.poller
        assert p._consumer is not None
        if not p.committer.commit(asynchronous=False):
            return
        chunks, self.waiting = self.waiting, []
        p.queues.push([c for c in chunks if c.tp in p.assigned])
        self._end_hold()
        log.info(
            "at-most-once: commit acknowledged; %d waiting records handed over",
            sum(len(c.messages) for c in chunks),
        )

    def _end_hold(self) -> None:
        """Resume at the client what kafleet's own bookkeeping has not paused."""
        p = self.poller
        if p._consumer is not None and not p.closing:
            unpaused = [tp for tp in p.assigned if not p.queues.is_paused(tp)]
            p._consumer.resume([TopicPartition(t, n) for t, n in unpaused])

    def drop(self, tps: list[TP]) -> dict[TP, int]:
        """Revoked or lost partitions' waiting records never ran: forget them, so that no
        commit covers them and the next owner reads them again. Returns each partition's
        first such offset. Ends the hold if nothing else waits."""
        if not self.waiting:
            return {}
        gone = set(tps)
        first: dict[TP, int] = {}
        kept = []
        for chunk in self.waiting:
            if chunk.tp in gone:
                first.setdefault(chunk.tp, chunk.start)
            else:
                kept.append(chunk)
        self.waiting = kept
        for tp, offset in first.items():
            self.poller.offsets.truncate(tp, offset)
        if not kept:
            self._end_hold()
        return first
