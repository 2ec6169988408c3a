"""How many replicas a group should run, from its lag: pure policy, no I/O.

Owns: the wish (``wanted``): ``ceil(lag / lag_per_replica)``, raised if the estimated time lag
is over its target, clamped to ``[min_replicas, min(max_replicas, partitions)]`` (a replica
beyond the partition count would sit idle), and zero below the activation threshold when the
group may scale to zero; and the decision (``decide``), stabilised like the HPA's behaviour:
a scale up follows the lowest wish of its (short) window, a scale down the highest wish of
its (long) window, so a dip in lag never flaps the fleet. Also the time-lag estimate,
interpolated from the history of log-end offsets as kafka-lag-exporter does.

Does not own reading lag (``lag_reader.py``) or writing replicas (``autoscaler.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from kafleet_operator.spec import Autoscaling


@dataclass(frozen=True)
class Decision:
    replicas: int
    reason: str  # CamelCase, for status and Events

    @property
    def changes(self) -> bool:
        return self.reason not in ("Steady", "External")


def wanted(
    lag: int,
    partitions: int,
    policy: Autoscaling,
    time_lag_s: float | None = None,
    current: int = 0,
) -> int:
    """The replicas this lag asks for, within the policy's bounds and the partition count."""
    if policy.min_replicas == 0 and lag <= policy.activation_lag:
        return 0
    count = math.ceil(lag / policy.lag_per_replica)
    if policy.target_time_lag_s and time_lag_s and time_lag_s > policy.target_time_lag_s:
        count = max(count, current + 1)  # behind in time: one more than now, whatever the count
    ceiling = min(policy.max_replicas, max(partitions, 1))
    floor = min(policy.min_replicas, ceiling)
    return max(floor, min(ceiling, max(count, 1 if lag > policy.activation_lag else 0)))


def decide(
    current: int,
    history: Sequence[tuple[float, int]],
    now: float,
    policy: Autoscaling,
) -> Decision:
    """``history``: (time, wish) pairs, newest last, the current wish included."""
    if policy.external:
        return Decision(current, "External")
    up_window = [w for t, w in history if now - t <= policy.scale_up_stabilization_s] or [
        history[-1][1]
    ]
    down_window = [w for t, w in history if now - t <= policy.scale_down_stabilization_s] or [
        history[-1][1]
    ]
    up_to = min(up_window)
    if up_to > current:
        return Decision(up_to, "ScaledUpForLag" if current else "ScaledFromZero")
    down_to = max(down_window)
    if down_to < current:
        return Decision(down_to, "ScaledToZero" if down_to == 0 else "ScaledDownAfterWindow")
    return Decision(current, "Steady")


def time_lag_s(ends: Sequence[tuple[float, int]], committed: int, now: float) -> float | None:
    """Seconds the committed offset is behind: when the log end last stood where the commit
    stands now, interpolated between the two samples around it (kafka-lag-exporter)."""
    if not ends:
        return None
    if committed >= ends[-1][1]:
        return 0.0
    for (t0, e0), (t1, e1) in zip(reversed(ends[:-1]), reversed(ends[1:]), strict=True):
        if e0 <= committed <= e1:
            at = t1 if e1 == e0 else t0 + (committed - e0) / (e1 - e0) * (t1 - t0)
            return max(0.0, now - at)
    return max(0.0, now - ends[0][0])  # older than the history: at least this much
