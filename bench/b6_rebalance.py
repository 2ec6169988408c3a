"""B6: the partitions a worker keeps through a rebalance, and how fast they go meanwhile.

A worker handles a backlog (8 partitions, by partition, 20 ms a record, and one record in
fifty takes 1 s: a heavy tail, which the recent p99 sees). A second worker joins, and later
leaves. While a revoke is pending, librdkafka fetches nothing for any partition of the worker
(REFERENCE.md), so the partitions it keeps run on what their queues hold; with
``revoke_policy: wait`` the revoke lasts as long as the revoked partitions' in-flight records
(at most a few times the recent p99 handler latency), with ``abandon`` it returns at once. The
queues hold about 2 s of work (``queue.max_seconds: 2``); one more run has queues of 10
records (0.2 s of work) to show what a revoke costs when the kept partitions have little
buffered. For each: the kept partitions' rate from the rebalance's start to 3 s after the
worker's callbacks ended, over their rate in the 6 s before, and how long the first worker's
revoke took.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.harness import Context, Table, backlog
from kafleet import ParallelConsumer, Record, load_config
from tests.infra.records import record_number

PARTITIONS = 8
HANDLER_S = 0.02
SLOW_S = 1.0  # one record in SLOW_EVERY
SLOW_EVERY = 50
STEADY_S = 6.0
AFTER_S = 3.0


def handle(record: Record) -> None:
    number = record_number(record.value or b"")
    time.sleep(SLOW_S if number % SLOW_EVERY == SLOW_EVERY - 1 else HANDLER_S)


@dataclass
class Log:
    """When each record of the first worker finished, by partition."""

    entries: list[tuple[float, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def handler(self) -> Callable[[Record], None]:
        def logged(record: Record) -> None:
            handle(record)
            with self.lock:
                self.entries.append((time.monotonic(), record.partition))

        return logged

    def rate(self, partitions: set[int], start: float, end: float) -> float:
        with self.lock:
            count = sum(1 for at, p in self.entries if p in partitions and start <= at < end)
        return count / max(end - start, 1e-9)


def _wait(condition: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"B6: timed out waiting for {what}")
        time.sleep(0.05)


def _kept(before: list[tuple[str, int]], after: list[tuple[str, int]]) -> set[int]:
    return {p for _, p in set(before) & set(after)}


def one_run(
    ctx: Context, protocol: str, policy: str, queue: dict[str, float]
) -> list[list[object]]:
    topic = backlog(ctx, PARTITIONS, ctx.scale(20_000, 8_000), keys=1_000)
    fields = {
        "bootstrap_servers": ctx.bootstrap,
        "group_id": f"bench-b6-{uuid.uuid4().hex[:8]}",
        "topics": [topic],
        "group_protocol": protocol,
        "ordering": "partition",
        "concurrency": PARTITIONS,
        "revoke_policy": policy,
        "drain_timeout_s": 10.0,
        "queue": queue,
        "kafka": {"topic.metadata.refresh.interval.ms": 1000},
    }
    run = [protocol, policy, ", ".join(f"{k} {v:g}" for k, v in queue.items())]
    log = Log()
    first = ParallelConsumer(load_config(None, fields), log.handler()).start()
    second: ParallelConsumer | None = None
    rows: list[list[object]] = []
    try:
        _wait(lambda: len(log.entries) > 200, 120, "the first worker to get going")
        time.sleep(STEADY_S)
        # A second worker joins.
        before = first.poller.assignment
        joined = time.monotonic()
        joiner = second = ParallelConsumer(load_config(None, fields), handle).start()
        _wait(lambda: first.stats.revokes and joiner.poller.assignment, 120, "the join")
        revokes = list(first.stats.revokes)
        ended = max(started + seconds for started, seconds, _ in revokes)
        time.sleep(max(0.0, ended + AFTER_S - time.monotonic()) + 0.5)
        kept = _kept(before, first.poller.assignment)
        steady = log.rate(kept, joined - STEADY_S, joined)
        during = log.rate(kept, joined, ended + AFTER_S)
        revoke_s = sum(seconds for _, seconds, _ in revokes)
        rows.append([*run, "a worker joins", len(kept), steady, during, during / steady, revoke_s])
        # ... and leaves again.
        time.sleep(STEADY_S)
        before = first.poller.assignment
        left = time.monotonic()
        joiner.close(grace_s=5)
        second = None
        _wait(lambda: len(first.poller.assignment) == PARTITIONS, 120, "the leave")
        back = time.monotonic()
        time.sleep(AFTER_S + 0.5)
        kept = _kept(before, first.poller.assignment)
        steady = log.rate(kept, left - STEADY_S, left)
        during = log.rate(kept, left, back + AFTER_S)
        rows.append([*run, "a worker leaves", len(kept), steady, during, during / steady, 0.0])
    finally:
        if second is not None:
            second.close(grace_s=5)
        first.close(grace_s=5)
    return rows


def run(ctx: Context) -> Table:
    table = Table(
        "b6",
        f"kept partitions through a rebalance: {PARTITIONS} partitions, "
        f"{HANDLER_S * 1000:g} ms a record and 1 in {SLOW_EVERY} takes {SLOW_S:g} s",
        [
            "protocol",
            "revoke_policy",
            "queue",
            "event",
            "kept",
            "steady/s",
            "during/s",
            "during / steady",
            "revoke s",
        ],
    )
    runs = [
        (protocol, policy, {"max_seconds": 2.0})
        for protocol in ("classic", "consumer")
        for policy in ("wait", "abandon")
    ]
    runs.append(("classic", "wait", {"max_records": 10}))
    for protocol, policy, queue in runs:
        for row in one_run(ctx, protocol, policy, queue):
            table.add(*row)
    table.notes.append(
        "during: from the second worker's start (or close) to 3 s after the first worker's "
        "revoke (or assignment) ended; revoke s: the first worker's revoke callbacks in all"
    )
    return table
