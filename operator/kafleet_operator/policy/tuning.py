"""Choosing ``max_poll_records`` from measured processing: pure policy, no I/O.

What the knob bounds in kafleet's worker. ``max_poll_records`` is KIP-41's bound on the
records one poll returns; in kafleet it bounds how many fetched records one poll hands from
the intake to the partitions' work queues (``intake.take``), round-robin across partitions.
It no longer bounds the work a revoke waits for: on revoke the worker drops the revoked
partitions' queued records (their offsets were never done, so the next owner fetches them
again) and waits only for the in-flight ones, at most ``concurrency`` runs of about
``RUN_BUDGET_S`` of handler time each (one record per thread when handlers are slow), for at
most ``drain_timeout_s`` and a few recent p99s (``rebalance.py``). The queues' bounds
(``queue.max_records``, ``max_bytes``, ``max_seconds``) bound what is buffered. So the old
model (a poll's records must drain within a share of ``drain_timeout_s``) tuned a knob that
does not move the drain; it is gone.

The model now: a poll should hand over what the handlers finish while the Poller waits its
longest (``poll_interval_ms``, when nothing new was fetched), times ``poll_intervals``, so the
handlers never wait for the Poller; more than that only coarsens the fair hand-over (and
lowers the queues' pause mark, ``headroom`` in ``poller.py``). The target is
``poll_intervals * concurrency * poll_interval_s / latency``: fast handlers raise the value,
slow ones lower it to the policy's floor. The value moves towards the target by at most
``max_step`` times per change; changes under 10% are not made (the ConfigMap is not rewritten
for noise), except to come back inside the bounds.

Also owns: the bounds every value written must keep (the policy's and the worker's own:
``ConsumerConfig`` takes 1 to 100,000 and no more than ``queue.max_records`` (in a share group
no more than ``concurrency / share.consumers``), and exits 2 on
more); which tuned value is in force (a tuning is kept only while ``spec.max_poll_records``
is the value it started from, and is clamped to the current bounds); the handlers' latency
over the window between two passes from the sidecars' cumulative counters (a pod new to the
window, or one whose counters went back, a restart, counts from the next pass); and whether
the last change is still on its way to the pods (the kubelet delivers a ConfigMap up to a
minute or two later), so no step is taken on figures of the value before.

Does not own reading the sidecars or writing the ConfigMap (``tuner.py``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from annotated_types import Le

from kafleet.config.model import ConsumerConfig
from kafleet_operator.policy.autopilot import Tuning

DEAD_BAND = 0.1
# The kubelet's sync period (60 s) and its ConfigMap cache (up to 60 s), the worker's 1 s
# watch, and a margin: after this a change that no pod reports is no longer waited for.
APPLY_TIMEOUT_S = 150.0


def _worker_max() -> int:
    """The highest ``max_poll_records`` the worker's ``ConsumerConfig`` takes at all."""
    limits = ConsumerConfig.model_fields["max_poll_records"].metadata
    return min(int(str(m.le)) for m in limits if isinstance(m, Le))


WORKER_MAX = _worker_max()


@dataclass(frozen=True)
class Tuned:
    """A tuned value as the ConfigMap records it: the value, the ``spec.max_poll_records`` it
    started from, and when it was written (epoch seconds)."""

    value: int
    start: int
    at: float


@dataclass(frozen=True)
class Counters:
    """One pod's cumulative handler figures as its sidecar reports them."""

    count: int
    total_s: float
    uptime_s: float = 0.0


@dataclass(frozen=True)
class Step:
    max_poll_records: int
    reason: str  # CamelCase, for Events

    @property
    def changes(self) -> bool:
        return self.reason != "Steady"


def bounds(worker: ConsumerConfig, policy: Tuning) -> tuple[int, int]:
    """(lowest, highest) value a tuning may write: the policy's, within what the worker takes
    (its own bound wins when the policy's floor is above it)."""
    highest = min(policy.max_max_poll_records, worker.queue.max_records, WORKER_MAX)
    if worker.group_type == "share":  # a share member takes no more than its handlers can
        highest = min(highest, max(1, worker.concurrency // worker.share.consumers))
    return min(policy.min_max_poll_records, highest), highest


def carried(
    worker: ConsumerConfig, policy: Tuning, tuned: Tuned | None, now: float
) -> Tuned | None:
    """The tuning to keep: None when tuning is off (the spec's value holds); a fresh start at
    ``spec.max_poll_records`` when nothing was tuned or the spec's value changed since the
    tuning started; else the tuned value clamped to the current bounds (a tighter
    ``queue.max_records`` or policy takes effect at once). A value that changes here is
    stamped ``now``: it is a change the pods have to receive."""
    if not policy.enabled:
        return None
    if tuned is None or tuned.start != worker.max_poll_records:
        return Tuned(worker.max_poll_records, worker.max_poll_records, now)
    lowest, highest = bounds(worker, policy)
    value = max(lowest, min(highest, tuned.value))
    return tuned if value == tuned.value else Tuned(value, tuned.start, now)


def target(latency_s: float, concurrency: int, poll_interval_s: float, policy: Tuning) -> int:
    """The records the handlers finish in ``poll_intervals`` of the Poller's longest wait."""
    if latency_s <= 0:
        return policy.max_max_poll_records
    return max(1, math.ceil(policy.poll_intervals * concurrency * poll_interval_s / latency_s))


def step(
    current: int,
    latency_s: float | None,
    concurrency: int,
    poll_interval_s: float,
    worker_bounds: tuple[int, int],
    policy: Tuning,
) -> Step:
    """The next value from ``current``: towards the target, by at most ``max_step`` times,
    inside ``worker_bounds`` (from ``bounds``); Steady when nothing was measured."""
    lowest, highest = worker_bounds
    outside = not lowest <= current <= highest
    if not policy.enabled or (latency_s is None and not outside):
        return Step(current, "Steady")
    goal = current if latency_s is None else target(latency_s, concurrency, poll_interval_s, policy)
    moved = min(
        max(goal, math.ceil(current / policy.max_step)), math.floor(current * policy.max_step)
    )
    new = max(lowest, min(highest, moved))
    if new == current or (not outside and abs(new - current) < DEAD_BAND * current):
        return Step(current, "Steady")
    if outside:
        return Step(new, "ClampedToBounds")
    return Step(new, "LoweredForSlowHandlers" if new < current else "RaisedForFastHandlers")


def window(before: Mapping[str, Counters], now: Mapping[str, Counters]) -> tuple[float | None, int]:
    """Mean handler seconds per record over what the pods finished between two passes, and
    how many records that is; (None, 0) when none finished any. A pod missing from ``before``
    (new, or newly ready) or whose figures went back (its worker restarted) is left out: its
    window starts now."""
    records, seconds = 0, 0.0
    for pod, c in now.items():
        b = before.get(pod)
        if b is None or c.count < b.count or c.total_s < b.total_s or c.uptime_s < b.uptime_s:
            continue
        records += c.count - b.count
        seconds += c.total_s - b.total_s
    return (seconds / records if records else None), records


def awaiting(wanted: int, applied: Iterable[int], changed_at: float | None, now: float) -> bool:
    """Whether the last change is still on its way: some ready pod does not report ``wanted``
    as applied yet (or none reports at all), and ``APPLY_TIMEOUT_S`` has not passed since."""
    if changed_at is None or now - changed_at >= APPLY_TIMEOUT_S:
        return False
    values = list(applied)
    return not values or any(v != wanted for v in values)
