"""What a worker's share consumers have done and are doing: their counts and the snapshot.

Owns: the thread-safe counts every member adds to (acquired, redelivered, accepted, released,
rejected, dead-lettered, archived, refused acknowledgements, polls, the largest poll), and
assembling the JSON-ready snapshot the sidecar serves (``kafleet_share_*`` metrics, liveness
without a poll interval, readiness while the sink fails) from the members and the stats. Does
not own deciding anything (``member.py``, ``attempts.py``) or judging health
(``assessment.py``).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kafleet.health import assessment
from kafleet.share.client import ShareRecord

if TYPE_CHECKING:
    from kafleet.share.share_consumer import ShareConsumer


@dataclass
class ShareCounts:
    """What the members did, for the state and the metrics (one lock for all members)."""

    acquired: int = 0
    redelivered: int = 0  # acquired with a delivery count above 1
    accepted: int = 0
    released: int = 0
    rejected: int = 0
    dead_lettered: int = 0
    archived: int = 0  # released on its last delivery, or its lock lost then
    acks_refused: int = 0  # acknowledgements the broker did not take (the lock was gone)
    polls: int = 0
    largest_poll: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **deltas: int) -> None:
        with self._lock:
            for name, delta in deltas.items():
                setattr(self, name, getattr(self, name) + delta)

    def polled(self, records: list[ShareRecord]) -> None:
        with self._lock:
            self.polls += 1
            self.acquired += len(records)
            self.redelivered += sum(r.delivery_count > 1 for r in records)
            self.largest_poll = max(self.largest_poll, len(records))

    def as_dict(self) -> dict[str, int]:
        with self._lock:
            return {k: v for k, v in vars(self).items() if not k.startswith("_")}


def snapshot(consumer: ShareConsumer, where: str | None) -> dict[str, Any]:
    """The consumer's state; ``where`` names its sink, if it has one."""
    now = time.monotonic()
    members = [
        {
            "index": m.index,
            "joined": m.joined,
            "seconds_since_turn": now - m.last_turn,
            "in_hand": len(m.in_hand),
            "oldest_in_hand_s": m.oldest_in_hand_s(),
        }
        for m in consumer.members
    ]
    stats = consumer.stats.as_dict()
    stats["seconds_since_poll"] = max((m["seconds_since_turn"] for m in members), default=0.0)
    snapshot: dict[str, Any] = {
        "group_id": consumer.config.group_id,
        "group_type": "share",
        "joined": bool(members) and all(m["joined"] for m in members),
        "record_lock_ms": int(consumer.lock_s * 1000),
        "processing_timeout_s": consumer.config.processing_timeout_s,
        "assigned": [],
        "partitions": {},
        "in_flight": sum(m["in_hand"] for m in members),
        "oldest_in_flight_s": max((m["oldest_in_hand_s"] for m in members), default=0.0),
        "abandoned_in_flight": 0,
        "oldest_abandoned_s": 0.0,
        "max_poll_records": consumer.max_poll_records,
        "concurrency": consumer.concurrency,
        "ordering": consumer.config.ordering,
        "guarantee": consumer.config.guarantee,
        "share": {
            **consumer.counts.as_dict(),
            "members": members,
            "lag": {f"{t}[{p}]": lag for (t, p), lag in sorted(consumer.lag.items())},
        },
        **stats,
    }
    if where is not None:  # failing: the worker is unready (assessment.readiness)
        failing = [m for m in consumer.members if m.sink_failing_since is not None]
        snapshot["sink"] = {
            "where": where,
            "failing_since": min((m.sink_failing_since or 0.0 for m in failing), default=None),
            "last_error": next((m.sink_error for m in failing), None),
        }
    wall = time.time()
    verdict = assessment.liveness({**snapshot, "written_at": wall}, wall, started_at=wall)
    snapshot["healthy"], snapshot["unhealthy_reasons"] = verdict.ok, verdict.reasons
    return snapshot
