"""The operator's periodic pass: every watched ConsumerGroup observed every interval.

Owns: the one loop that replaces a per-resource kopf timer. kopf keeps a finalizer on every
object that has a timer or a daemon (``kopf.on.timer`` and ``kopf.on.daemon`` register with
``requires_finalizer=True``: it must stop the task before the object goes), so with a timer
a ConsumerGroup cannot be deleted while the operator is down. Here the groups come from a kopf
event handler (``watched.groups``: kept current by the same watch, removed on deletion, no
finalizer).

Each interval: every group says where it reads its offsets (``plan``: its cluster and what it
wants there, or None when it reads nothing: an invalid spec, a missing Secret); each cluster
is read once for all its groups (``clusters.View.read``, in a process of its own per cluster,
``readers.py``, waited on in a thread: a slow or unreachable cluster delays only its groups),
and as soon as a cluster's snapshot is in, each of its groups is observed in a worker thread
(``observe``, which finds the snapshot in the group's memo under ``kafka``). Never two passes
of one group at once, nor two reads of one cluster: a cluster whose read outlives the
interval is left out of the next one. Each group has its own memory (its lag history),
forgotten when the group is gone or another operator pod leads it; a cluster no group reads
any more is let go after a while. A standby stays ready to lead: the clusters of the groups
other pods lead are kept warm in the background (``standby.py``).

Does not own what a pass does (``observer.py``) or reading Kafka (``clusters.py``,
``readers.py``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from confluent_kafka import KafkaException

from kafleet_operator.reading import lag_reader, readers, snapshots
from kafleet_operator.reconcile import metrics, standby

log = logging.getLogger("kafleet.operator")
Body = Mapping[str, Any]
Memo = dict[str, Any]
Plan = Callable[[Body, Memo], snapshots.Target | None]
Member = tuple[str, Body, Memo, snapshots.Target]
KAFKA = "kafka"  # the memo's key for (this pass's snapshot or error, the group's want)


def _guarded(observe: Callable[[Body, Memo], None], body: Body, memo: Memo) -> None:
    try:
        observe(body, memo)
    except Exception:  # one group's failure is logged; the next interval tries again
        meta = body.get("metadata", {})
        log.exception("observing %s/%s failed", meta.get("namespace"), meta.get("name"))


def _planned(plan: Plan, due: list[tuple[str, Body, Memo]]) -> list[snapshots.Target | None]:
    targets: list[snapshots.Target | None] = []
    for _, body, memo in due:
        try:
            targets.append(plan(body, memo))
        except Exception:  # observed without Kafka; the pass reports what it can
            meta = body.get("metadata", {})
            log.exception("planning %s/%s failed", meta.get("namespace"), meta.get("name"))
            targets.append(None)
    return targets


def forget(memo: Memo) -> None:
    """Close whatever a gone group's memory holds open (its metric series)."""
    for value in memo.values():
        close = getattr(value, "close", None)
        if callable(close):
            try:
                close()
            except Exception:  # a gone group's: best effort
                log.debug("closing %r failed", value, exc_info=True)


class Pass:
    """The state the loop keeps between intervals."""

    def __init__(self, observe: Callable[[Body, Memo], None], workers: int, threads: int) -> None:
        self.observe = observe
        self.pool = concurrent.futures.ThreadPoolExecutor(workers, "kafleet-observe")
        self.waiting = concurrent.futures.ThreadPoolExecutor(threads, "kafleet-kafka")
        self.views = readers.Readers()
        # A group's pass (a thread pool's future: its end wakes nothing, the loop looks at each
        # interval), or its cluster's read.
        self.running: dict[str, asyncio.Future[Any] | concurrent.futures.Future[None]] = {}
        self.reads: dict[str, asyncio.Future[None]] = {}
        self.memos: dict[str, Memo] = {}
        self.warmth = standby.Warmth(self.views)  # the clusters of groups others lead

    def busy(self, uid: str) -> bool:
        return uid in self.running and not self.running[uid].done()

    def start(self, uid: str, body: Body, memo: Memo) -> None:
        self.running[uid] = self.pool.submit(_guarded, self.observe, body, memo)

    async def read_then_observe(self, key: str, members: list[Member]) -> None:
        reader = self.views.get(members[0][3])
        wants = [target.want for *_, target in members]
        loop = asyncio.get_running_loop()
        started = loop.time()
        snapshot = await loop.run_in_executor(self.waiting, reader.read, wants)
        metrics.KAFKA_READ_SECONDS.observe(loop.time() - started)
        if isinstance(snapshot, KafkaException) and lag_reader.is_authentication_failure(snapshot):
            self.views.drop(key)  # the next pass connects afresh, with what the Secrets say then
        for uid, body, memo, target in members:
            memo[KAFKA] = (snapshot, target.want)
            self.start(uid, body, memo)

    def forget(self, seen: set[str]) -> None:
        for uid in [u for u in self.memos if u not in seen and not self.busy(u)]:
            self.running.pop(uid, None)
            forget(self.memos.pop(uid))
        reading = {k for k, read in self.reads.items() if not read.done()}
        self.views.sweep(reading | self.warmth.busy())
        metrics.KAFKA_CLUSTERS.set(len(self.views))

    def close(self) -> None:
        """The reads still out are cancelled first: one that came back after the pools shut
        would fail scheduling its groups, and kopf re-raises the error of any task left at
        its exit (a clean SIGTERM exited 1)."""
        for read in self.reads.values():
            read.cancel()
        self.warmth.close()
        self.views.close()
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.waiting.shutdown(wait=False, cancel_futures=True)


async def run(
    groups: Mapping[Any, Iterable[Body]],
    observe: Callable[[Body, Memo], None],
    plan: Plan,
    interval_s: float,
    workers: int = 2,
    reader_threads: int = 16,
    observed: Callable[[Body], bool] = lambda body: True,
    kept: Callable[[Body], bool] = lambda body: False,
) -> None:
    """Observe every group of ``groups`` (by key, its bodies) every ``interval_s`` until
    cancelled: those ``observed`` says yes to; the memory of the others is forgotten, but for
    those ``kept`` says yes to (passed over this time only). ``reader_threads``: clusters read
    at once (a thread waits on each; made as needed)."""
    loop = asyncio.get_running_loop()
    state = Pass(observe, workers, reader_threads)
    try:
        while True:
            started = loop.time()
            seen: set[str] = set()
            due: list[tuple[str, Body, Memo]] = []
            elsewhere: list[Body] = []  # groups other pods lead
            for store in list(groups.values()):
                for body in list(store):
                    uid = str(body["metadata"]["uid"])
                    if not observed(body):
                        if kept(body):
                            seen.add(uid)
                        else:
                            elsewhere.append(body)
                        continue
                    seen.add(uid)
                    if not state.busy(uid):
                        due.append((uid, body, state.memos.setdefault(uid, {})))
            state.forget(seen)
            targets = await loop.run_in_executor(state.pool, _planned, plan, due)
            by_cluster: dict[str, list[Member]] = {}
            for (uid, body, memo), target in zip(due, targets, strict=True):
                if target is None:
                    state.start(uid, body, memo)
                else:
                    by_cluster.setdefault(target.key, []).append((uid, body, memo, target))
            for key, members in by_cluster.items():
                if key in state.reads and not state.reads[key].done():
                    continue  # its last read is still out: its groups wait for it
                read = asyncio.ensure_future(state.read_then_observe(key, members))
                state.reads[key] = read
                for uid, *_ in members:
                    state.running[uid] = read
            if state.warmth.due(started):
                own = {members[0][3].bootstrap for members in by_cluster.values()}
                state.warmth.start(started, plan, standby.choose(elsewhere, own))
            await asyncio.sleep(max(0.0, interval_s - (loop.time() - started)))
    finally:
        state.close()
