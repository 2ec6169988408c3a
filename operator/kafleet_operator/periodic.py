"""The operator's periodic pass: every watched ConsumerGroup observed every interval.

Owns: the one loop that replaces a per-resource kopf timer. kopf keeps a finalizer on every
object that has a timer or a daemon (``kopf.on.timer`` and ``kopf.on.daemon`` register with
``requires_finalizer=True``: it must stop the task before the object goes), so with a timer
a ConsumerGroup cannot be deleted while the operator is down. Here the groups come from a kopf
index (kept current by the same watch, removed on deletion, no finalizer), and each interval
every group is observed in a worker thread: never two passes of one group at once, a slow
group (an unreachable broker) never delays the others. Each group has its own memory (its lag
history, its Kafka client), forgotten (closed) when the group is gone.

Does not own what a pass does (``observer.py``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

log = logging.getLogger("kafleet.operator")
Body = Mapping[str, Any]
Memo = dict[str, Any]


def _guarded(observe: Callable[[Body, Memo], None], body: Body, memo: Memo) -> None:
    try:
        observe(body, memo)
    except Exception:  # one group's failure is logged; the next interval tries again
        meta = body.get("metadata", {})
        log.exception("observing %s/%s failed", meta.get("namespace"), meta.get("name"))


def forget(memo: Memo) -> None:
    """Close whatever a gone group's memory holds open (its Kafka client)."""
    for value in memo.values():
        close = getattr(value, "close", None)
        if callable(close):
            try:
                close()
            except Exception:  # closing the client of a gone group: best effort
                log.debug("closing %r failed", value, exc_info=True)


async def run(
    groups: Mapping[Any, Iterable[Body]],
    observe: Callable[[Body, Memo], None],
    interval_s: float,
    workers: int = 8,
) -> None:
    """Observe every group of the ``groups`` index every ``interval_s`` until cancelled."""
    loop = asyncio.get_running_loop()
    pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="kafleet-observe")
    running: dict[str, asyncio.Future[None]] = {}
    memos: dict[str, Memo] = {}
    try:
        while True:
            seen: set[str] = set()
            for store in list(groups.values()):
                for body in list(store):
                    uid = str(body["metadata"]["uid"])
                    seen.add(uid)
                    if uid in running and not running[uid].done():
                        continue
                    memo = memos.setdefault(uid, {})
                    running[uid] = loop.run_in_executor(pool, _guarded, observe, body, memo)
            for uid in [u for u in memos if u not in seen]:
                if uid not in running or running[uid].done():
                    running.pop(uid, None)
                    forget(memos.pop(uid))
            await asyncio.sleep(interval_s)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
