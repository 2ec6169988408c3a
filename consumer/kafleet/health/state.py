"""What the consumer has done and is doing: counters, timings, and the snapshot for the sidecar.

Owns: thread-safe counters (records processed, retries, dead letters, commits, rebalances,
fetch stalls), the handler-latency histogram, revoke durations, the time of the last poll, the
watched config file's rejected changes (how many, and why the last one, while it stands), and
assembling a JSON-ready snapshot together with the queues' and the offset tracker's views.
Does not own serving it (the sidecar), judging health (``assessment.py``) or lag (``lag.py``).
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, field
from typing import Any

# Handler latency buckets in seconds (upper bounds), as Prometheus histograms take them.
LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
)


@dataclass
class Stats:
    """Counters shared by the Poller and the Executor threads."""

    records_processed: int = 0
    records_failed: int = 0  # handler attempts that raised
    retries: int = 0
    dead_lettered: int = 0
    commits: int = 0
    commit_failures: int = 0
    committed_records: int = 0
    assigned: int = 0
    revoked: int = 0
    lost: int = 0
    rebalances: int = 0
    pauses: int = 0
    resumes: int = 0
    # The last revokes: (monotonic start, seconds, partitions), newest last.
    revokes: deque[tuple[float, float, list[tuple[str, int]]]] = field(
        default_factory=lambda: deque(maxlen=50)
    )
    revoke_timeouts: int = 0
    offset_rewinds: int = 0  # partitions whose position went back (truncation, reset)
    fetch_stalls: int = 0  # partitions found fetching nothing while behind (librdkafka#5586)
    fetch_stalls_recovered: int = 0  # of those, flowing again (no restart of the worker)
    fetch_restarts: int = 0  # fetches restarted (seek, or a re-assignment of the partition)
    last_poll: float = field(default_factory=time.monotonic)
    polls: int = 0
    latency_counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    latency_sum: float = 0.0
    commit_seconds_sum: float = 0.0
    commit_seconds_count: int = 0
    started: float = field(default_factory=time.monotonic)
    sink_batches: int = 0  # batches the sink wrote
    sink_records: int = 0  # records whose results they held
    sink_rows: int = 0
    sink_write_failures: int = 0  # failed attempts (each is retried)
    sink_write_seconds_sum: float = 0.0
    fatal_error: str | None = None
    config_rejections: int = 0  # changes of the watched config file that were rejected
    config_rejected: str | None = None  # why the file's content is not in force; None once it is
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **deltas: int) -> None:
        with self._lock:
            for name, delta in deltas.items():
                setattr(self, name, getattr(self, name) + delta)

    def observe_run(self, seconds: float, records: int = 1) -> None:
        """``records`` handled in ``seconds`` (one run): each counts with the run's mean."""
        with self._lock:
            self.latency_counts[bisect_left(LATENCY_BUCKETS, seconds / records)] += records
            self.latency_sum += seconds
            self.records_processed += records

    def observe_each(self, latencies: list[float]) -> None:
        """Records handled in these times, one each."""
        with self._lock:
            counts = self.latency_counts
            for seconds in latencies:
                counts[bisect_left(LATENCY_BUCKETS, seconds)] += 1
            self.latency_sum += sum(latencies)
            self.records_processed += len(latencies)

    def observe_commit(self, seconds: float) -> None:
        with self._lock:
            self.commit_seconds_sum += seconds
            self.commit_seconds_count += 1

    def observe_write(self, seconds: float, records: int, rows: int) -> None:
        with self._lock:
            self.sink_batches += 1
            self.sink_records += records
            self.sink_rows += rows
            self.sink_write_seconds_sum += seconds

    def observe_revoke(
        self, started: float, seconds: float, tps: list[tuple[str, int]], timed_out: bool
    ) -> None:
        with self._lock:
            self.revokes.append((started, seconds, tps))
            self.revoke_timeouts += int(timed_out)

    def config_outcome(self, rejected: str | None) -> None:
        """A change of the watched config file was rejected (why) or applied (None)."""
        with self._lock:
            self.config_rejections += rejected is not None
            self.config_rejected = rejected

    def polled(self) -> None:
        self.last_poll = time.monotonic()  # one writer (the Poller): no lock needed
        self.polls += 1

    def as_dict(self) -> dict[str, Any]:
        with self._lock:
            return {
                "records_processed": self.records_processed,
                "records_failed": self.records_failed,
                "retries": self.retries,
                "dead_lettered": self.dead_lettered,
                "commits": self.commits,
                "commit_failures": self.commit_failures,
                "rebalances": self.rebalances,
                "partitions_assigned_total": self.assigned,
                "partitions_revoked_total": self.revoked,
                "partitions_lost_total": self.lost,
                "pauses": self.pauses,
                "resumes": self.resumes,
                "revoke_seconds": [seconds for _, seconds, _ in self.revokes],
                "revoke_timeouts": self.revoke_timeouts,
                "offset_rewinds": self.offset_rewinds,
                "fetch_stalls": self.fetch_stalls,
                "fetch_stalls_recovered": self.fetch_stalls_recovered,
                "fetch_restarts": self.fetch_restarts,
                "seconds_since_poll": time.monotonic() - self.last_poll,
                "polls": self.polls,
                "handler_latency": {
                    "buckets": list(LATENCY_BUCKETS),
                    "counts": list(self.latency_counts),
                    "sum": self.latency_sum,
                },
                "commit_latency": {
                    "sum": self.commit_seconds_sum,
                    "count": self.commit_seconds_count,
                },
                "revoke_drain_seconds_sum": sum(seconds for _, seconds, _ in self.revokes),
                "sink_batches": self.sink_batches,
                "sink_records": self.sink_records,
                "sink_rows": self.sink_rows,
                "sink_write_failures": self.sink_write_failures,
                "sink_write_seconds_sum": self.sink_write_seconds_sum,
                "uptime_seconds": time.monotonic() - self.started,
                "fatal_error": self.fatal_error,
                "config_rejections": self.config_rejections,
                "config_rejected": self.config_rejected,
            }
