"""How many replicas a group should run, from its lag: pure policy, no I/O.

Owns the wish (``wanted``): ``ceil(lag / lag_per_replica)``, and no scale-down below what the
input needs (``keeping_up``: the input rate over a busy replica's commit rate, once both are
measured; KEDA's lag-only wish shrinks a fleet that keeps up and flaps it); over the time-lag
target, what the measured rates need (the input rate plus the backlog to clear within the
target, over the rate one ready replica commits; one more than now while no rate is measured
yet); clamped to ``[min_replicas, min(max_replicas, partitions)]`` (a replica beyond the
partition count would sit idle), snapped to a divisor of the partition count with
``even_partitions`` (``even``, as KEDA snaps: up), and zero below the activation threshold when
the group may scale to zero. A share group (KIP-932: every member takes records of every
partition, each record locked to the member that took it) has no such cap: its replicas go up
to ``max_replicas`` whatever the partition count, and nothing is snapped (the spec refuses
``even_partitions`` with it: there is nothing to even out). The lag that drives it
(``driving_lag``: without the partitions the sidecars judge stuck, with
``exclude_persistent_lag``).

Owns the decision (``decide``), stabilised like the HPA's behaviour: a scale up follows the
lowest wish of its (short) window, only once the last step's pods are Ready, and, for a group
whose replicas' commit rate is not measured yet (``measured``; or every group without
``scale_up_in_one_step``), at most ``scale_up_max_pods`` or ``scale_up_max_percent`` per
``scale_up_period_s``: a measured group goes to its wish in one step; a scale down
follows the highest wish of its (long) window, and only once the operator has watched the
group for that whole window (after a restart too: KEDA's ``initialCooldownPeriod``), so a
dip in lag never flaps the fleet. And what a pass whose lag could not be read does
(``unreadable``): hold the replicas, or KEDA's ``fallback`` after its threshold. Also the time
lag, interpolated from the history of log-end offsets as kafka-lag-exporter does.

Does not own reading lag (``lag_reader.py``), the histories (``histories.py``) or writing
replicas (``autoscaler.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kafleet_operator.policy.autopilot import Autoscaling

TP = tuple[str, int]
# The sidecars' verdict of a partition whose commit has not moved for minutes with lag. Not
# STALL (no commit in a 10 s window): handlers slower than that, kafleet's very use, make every
# busy partition STALL, and excluding them would keep an overloaded fleet from scaling up.
PERSISTENT = ("STOP",)
HEADROOM = 1.1  # replicas for the input: 10% over it, as the HPA's tolerance


@dataclass(frozen=True)
class Decision:
    replicas: int
    reason: str  # CamelCase, for status and Events
    current: int  # the replicas the decision started from

    @property
    def changes(self) -> bool:
        return self.replicas != self.current


@dataclass(frozen=True)
class Rates:
    """Measured over the last passes (``histories.Offsets.rates``), records a second."""

    input_per_s: float  # into the group's partitions
    per_replica_per_s: float | None  # committed by one ready replica (None: not measured)
    capacity_per_s: float | None = None  # the same, measured while busy (None: never busy)


def driving_lag(lag: Mapping[TP, int], statuses: Mapping[str, str]) -> int:
    """The lag without the partitions the sidecars judge ``STOP`` (keyed
    ``topic[partition]``, as their ``/status`` says ``lag_status``)."""
    return sum(n for (t, p), n in lag.items() if statuses.get(f"{t}[{p}]") not in PERSISTENT)


def even(count: int, partitions: int, floor: int, ceiling: int) -> int:
    """The smallest divisor of ``partitions`` from ``count`` up within ``[floor, ceiling]``,
    else the largest one below; ``count`` as it is when none is within the bounds."""
    if count == 0 or partitions < 1:
        return count
    divisors = [d for d in range(max(floor, 1), ceiling + 1) if partitions % d == 0]
    if not divisors:
        return count
    return min((d for d in divisors if d >= count), default=max(divisors))


def measured(rates: Rates | None) -> bool:
    """Whether what one replica commits is measured: the group has run long enough for its
    wish to be sized from rates, so it is taken in one step (``decide``)."""
    return rates is not None and bool(rates.capacity_per_s or rates.per_replica_per_s)


def _for_time_lag(lag: int, target_s: float, current: int, rates: Rates | None) -> int:
    per_replica = rates and (rates.capacity_per_s or rates.per_replica_per_s)
    if rates is None or not per_replica:
        return current + 1  # nothing measured yet: one step, taken once the pods are Ready
    needed = rates.input_per_s + lag / target_s
    return math.ceil(needed / per_replica)


def keeping_up(rates: Rates | None) -> int:
    """The replicas the input needs, with ``HEADROOM``: the input rate over what one replica
    commits when busy; 0 while either is unknown. ``wanted`` keeps at most the replicas that
    run by it: a steady input that a fleet keeps up with leaves little lag (only what its
    queues hold), and a wish from that lag alone would scale the fleet down until the lag grew
    back, and then up again."""
    if rates is None or not rates.capacity_per_s or rates.input_per_s <= 0:
        return 0
    return math.ceil(rates.input_per_s * HEADROOM / rates.capacity_per_s)


def wanted(
    lag: int,
    partitions: int,
    policy: Autoscaling,
    time_lag_s: float | None = None,
    current: int = 0,
    rates: Rates | None = None,
    *,
    share: bool = False,
) -> int:
    """The replicas this lag asks for, within the policy's bounds and the partition count
    (``share``: a share group's, within the policy's bounds alone)."""
    # What the input needs only holds replicas that run (it never grows a fleet: the lag and
    # the time lag do), so a burst's rate does not outlast the burst in a bigger fleet.
    hold = min(keeping_up(rates), current)
    if policy.min_replicas == 0 and lag <= policy.activation_lag and hold == 0:
        return 0
    count = max(math.ceil(lag / policy.lag_per_replica), hold)
    target = policy.target_time_lag_s
    if target and time_lag_s and time_lag_s > target:
        count = max(count, _for_time_lag(lag, target, current, rates))
    ceiling = policy.max_replicas if share else min(policy.max_replicas, max(partitions, 1))
    floor = min(policy.min_replicas, ceiling)
    count = max(floor, min(ceiling, max(count, 1 if lag > policy.activation_lag else 0)))
    if policy.even_partitions and not share:
        return even(count, partitions, floor, ceiling)
    return count


def up_limit(
    current: int, steps: Sequence[tuple[float, int]], now: float, policy: Autoscaling
) -> int:
    """The most replicas a scale up may reach now: from the count at the start of the period
    (before its first step; ``steps``: (time, replicas before) of the scale ups), the more of
    ``scale_up_max_pods`` added and ``scale_up_max_percent`` grown, as the HPA's policies."""
    within = [before for t, before in sorted(steps) if now - t < policy.scale_up_period_s]
    base = within[0] if within else current
    grown = math.ceil(base * (1 + policy.scale_up_max_percent / 100))
    return max(base + policy.scale_up_max_pods, grown)


def decide(
    current: int,
    history: Sequence[tuple[float, int]],
    now: float,
    policy: Autoscaling,
    *,
    ready: int | None = None,
    watched_since: float | None = None,
    steps: Sequence[tuple[float, int]] = (),
    since_scale_s: float | None = None,
    rates_measured: bool = False,
) -> Decision:
    """``history``: (time, wish) pairs, newest last, the current wish included; ``ready``:
    the Deployment's ready replicas; ``watched_since``: when this process began watching the
    group (default: the oldest wish); ``steps``: the recent scale ups (time, replicas
    before); ``since_scale_s``: seconds since the last scale (None: long ago);
    ``rates_measured``: what one replica commits is measured (``measured``)."""
    if policy.external:
        return Decision(current, "External", current)
    newest = [history[-1][1]]
    up_window = [w for t, w in history if now - t <= policy.scale_up_stabilization_s] or newest
    down_window = [w for t, w in history if now - t <= policy.scale_down_stabilization_s]
    up_to = min(up_window)
    if up_to > current:
        waited = since_scale_s is None or since_scale_s >= policy.scale_up_ready_timeout_s
        if ready is not None and ready < current and not waited:
            return Decision(current, "WaitingForReadyPods", current)
        one_step = policy.scale_up_in_one_step and rates_measured
        to = up_to if one_step else min(up_to, up_limit(current, steps, now, policy))
        if to <= current:
            return Decision(current, "WaitingForScaleUpPeriod", current)
        return Decision(to, "ScaledUpForLag" if current else "ScaledFromZero", current)
    down_to = max(down_window or newest)
    if down_to < current:
        since = history[0][0] if watched_since is None else watched_since
        if now - since < policy.scale_down_stabilization_s:
            return Decision(current, "WatchingBeforeScaleDown", current)
        reason = "ScaledToZero" if down_to == 0 else "ScaledDownAfterWindow"
        return Decision(down_to, reason, current)
    return Decision(current, "Steady", current)


def unreadable(current: int, failures: int, policy: Autoscaling) -> Decision:
    """A pass that could not read the lag (``failures`` in a row, this one included): the
    replicas are held (unknown is not zero), or KEDA's ``fallback`` once there were more
    failures than its ``failure_threshold``."""
    fallback = policy.fallback
    if policy.external or fallback is None or failures <= fallback.failure_threshold:
        return Decision(current, "LagUnknown", current)
    if fallback.behavior == "current_replicas_if_higher":
        to = max(current, fallback.replicas)
    elif fallback.behavior == "current_replicas_if_lower":
        to = min(current, fallback.replicas)
    else:
        to = fallback.replicas
    return Decision(to, "Fallback", current)


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
