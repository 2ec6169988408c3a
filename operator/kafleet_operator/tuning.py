"""Choosing ``max_poll_records`` from measured processing: pure policy, no I/O.

Owns: the step from the sidecars' figures (handler latency per record and the concurrency the
workers run) to a new ``max_poll_records``. One poll's records, spread over ``concurrency``
handlers, take ``records / concurrency * latency`` seconds; that should finish within
``target_share`` of ``drain_timeout_s``, so that a revoke can drain a poll's work before its
deadline (KIP-62's point: processing time, not polling, is what must be bounded). The value
moves towards that target by at most ``max_step`` times per change, stays within the policy's
bounds and never exceeds the queue's bound; small changes (under 10%) are not made at all, so
the ConfigMap is not rewritten for noise.

Does not own measuring (the sidecars) or writing the ConfigMap (``tuner.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kafleet_operator.spec import Tuning

DEAD_BAND = 0.1


@dataclass(frozen=True)
class Step:
    max_poll_records: int
    reason: str  # CamelCase, for Events

    @property
    def changes(self) -> bool:
        return self.reason != "Steady"


def target(latency_s: float, concurrency: int, drain_timeout_s: float, policy: Tuning) -> int:
    """The ``max_poll_records`` whose work fits the drain deadline's share."""
    if latency_s <= 0:
        return policy.max_max_poll_records
    return max(1, math.floor(policy.target_share * drain_timeout_s * concurrency / latency_s))


def step(
    current: int,
    latency_s: float | None,
    concurrency: int,
    drain_timeout_s: float,
    queue_max_records: int,
    policy: Tuning,
) -> Step:
    if not policy.enabled or latency_s is None:
        return Step(current, "Steady")
    goal = target(latency_s, concurrency, drain_timeout_s, policy)
    bounded = min(
        max(goal, math.ceil(current / policy.max_step)), math.floor(current * policy.max_step)
    )
    upper = min(policy.max_max_poll_records, queue_max_records)
    new = max(policy.min_max_poll_records, min(upper, bounded))
    if new == current or abs(new - current) < DEAD_BAND * current:
        return Step(current, "Steady")
    return Step(new, "LoweredForSlowHandlers" if new < current else "RaisedForFastHandlers")
