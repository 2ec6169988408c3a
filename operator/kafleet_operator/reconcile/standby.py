"""What a pod keeps ready for the groups other pods lead: a connection to their Kafka clusters.

Owns: choosing those clusters (``choose``, pure: one group a bootstrap address, the address
most groups share first, none this pod's own groups read, at most ``MOST``) and keeping each
warm (``Warmth``): every ``EVERY_S``, in the background on a thread of its own, the chosen
groups are planned as a pass would (their credentials from the Secrets they name, so one group
an address, not every group, reads Secrets) and each cluster's reading process is asked for
its metadata alone (``clusters.View.read`` with no wants), which starts the process and its
librdkafka client and keeps its connection open. Kafka's Java admin is not made (about 90 MB
a cluster): the first read as a leader makes it.

A touch and a real read of one cluster never run at once (``readers.Reader`` takes one at a
time); a touch waits behind nothing of the pass and the pass waits behind at most one touch.

Does not own the reading processes (``readers.py``) or the pass (``periodic.py``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from confluent_kafka import KafkaException

from kafleet_operator.reading import lag_reader, readers, snapshots

log = logging.getLogger("kafleet.operator")
Body = Mapping[str, Any]
Plan = Callable[[Body, dict[str, Any]], snapshots.Target | None]
EVERY_S = 60.0  # the metadata a touch asks for is cached this long by the reading process
MOST = 8  # clusters kept warm, each a reading process of about 50 MB


def choose(elsewhere: Iterable[Body], reading: set[str], most: int = MOST) -> list[Body]:
    """One group for each bootstrap address of the groups other pods lead, those most groups
    share first, none of the addresses this pod reads for its own groups (``reading``), at most
    ``most``. From the raw spec: a group whose address is not a string is left out."""
    firsts: dict[str, Body] = {}
    counts: Counter[str] = Counter()
    for body in elsewhere:
        address = (body.get("spec") or {}).get("bootstrap_servers")
        if not isinstance(address, str) or address in reading:
            continue
        counts[address] += 1
        firsts.setdefault(address, body)
    return [firsts[address] for address, _ in counts.most_common(most)]


class Warmth:
    """The clusters a standby keeps warm, and the touches under way."""

    def __init__(self, views: readers.Readers) -> None:
        self.views = views
        self.thread = concurrent.futures.ThreadPoolExecutor(1, "kafleet-standby")
        self.at: float | None = None
        self.task: asyncio.Future[None] | None = None
        self.touching: tuple[str, ...] = ()

    def due(self, now: float) -> bool:
        running = self.task is not None and not self.task.done()
        return not running and (self.at is None or now - self.at >= EVERY_S)

    def start(self, now: float, plan: Plan, chosen: list[Body]) -> None:
        """Plan ``chosen`` and touch their clusters, in the background."""
        self.at = now
        self.task = asyncio.ensure_future(self._warm(plan, chosen))

    def busy(self) -> set[str]:
        """The clusters a touch may be reading now (not to be let go)."""
        return set(self.touching) if self.task is not None and not self.task.done() else set()

    async def _warm(self, plan: Plan, chosen: list[Body]) -> None:
        loop = asyncio.get_running_loop()
        targets = await loop.run_in_executor(self.thread, _planned, plan, chosen)
        self.touching = tuple(t.key for t in targets)
        for target in targets:
            reader = self.views.get(target)
            found = await loop.run_in_executor(self.thread, reader.read, [])
            if isinstance(found, KafkaException):  # its groups' leader says it (Degraded)
                log.debug("keeping %s warm: %s", target.bootstrap, found)
                if lag_reader.is_authentication_failure(found):
                    self.views.drop(target.key)

    def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
        self.thread.shutdown(wait=False, cancel_futures=True)


def _planned(plan: Plan, chosen: list[Body]) -> list[snapshots.Target]:
    targets = []
    for body in chosen:
        try:
            target = plan(body, {})  # a memo of its own: nothing of the group's is kept
        except Exception:  # a defect: logged; the cluster is left cold
            meta = body.get("metadata", {})
            log.exception("planning %s/%s failed", meta.get("namespace"), meta.get("name"))
            continue
        if target is not None:
            targets.append(target)
    return targets
