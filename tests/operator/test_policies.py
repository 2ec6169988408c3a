"""The scaling and tuning policies, exhaustively: replicas follow lag within the bounds and the
partition count, scale up at once and down only after the window, never flap (the tuning
policy's tests are in test_tuning_policy.py)."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from kafleet_operator.policy.autopilot import Autoscaling
from kafleet_operator.policy.scaling import decide, time_lag_s, wanted

policies = st.builds(
    Autoscaling,
    min_replicas=st.integers(0, 5),
    max_replicas=st.integers(5, 50),
    lag_per_replica=st.integers(1, 10_000),
    activation_lag=st.integers(0, 100),
    scale_down_stabilization_s=st.integers(0, 600),
)


@given(lag=st.integers(0, 10**9), partitions=st.integers(1, 200), policy=policies)
def test_replicas_stay_within_the_bounds_and_the_partition_count(
    lag: int, partitions: int, policy: Autoscaling
) -> None:
    n = wanted(lag, partitions, policy)

    assert n <= min(policy.max_replicas, partitions)
    assert n >= min(policy.min_replicas, partitions)
    if lag > policy.activation_lag:
        assert n >= min(math.ceil(lag / policy.lag_per_replica), policy.max_replicas, partitions)


def test_a_backlog_asks_one_replica_per_lag_per_replica() -> None:
    policy = Autoscaling(min_replicas=1, max_replicas=10, lag_per_replica=100)

    assert wanted(0, 8, policy) == 1
    assert wanted(250, 8, policy) == 3
    assert wanted(10_000, 8, policy) == 8  # never more than the partitions
    assert wanted(10_000, 20, policy) == 10  # nor than max_replicas


def test_scale_to_zero_waits_for_the_activation_threshold() -> None:
    policy = Autoscaling(min_replicas=0, max_replicas=4, lag_per_replica=100, activation_lag=50)

    assert wanted(0, 4, policy) == 0
    assert wanted(50, 4, policy) == 0
    assert wanted(51, 4, policy) == 1


def test_being_behind_in_time_adds_a_replica() -> None:
    policy = Autoscaling(lag_per_replica=10_000, target_time_lag_s=30)

    assert wanted(100, 8, policy, time_lag_s=10, current=2) == 1
    assert wanted(100, 8, policy, time_lag_s=60, current=2) == 3


def test_up_at_once_down_only_after_the_window() -> None:
    policy = Autoscaling(min_replicas=1, max_replicas=8, scale_down_stabilization_s=60)

    assert decide(1, [(0, 4)], 0, policy).replicas == 4
    history = [(0.0, 4), (30.0, 1)]
    assert decide(4, history, 30, policy).replicas == 4  # still in the window: stay
    later = decide(4, [*history, (61.0, 1)], 61, policy)
    assert (later.replicas, later.reason) == (1, "ScaledDownAfterWindow")


def test_an_external_autoscaler_owns_the_replicas() -> None:
    policy = Autoscaling(external=True)

    decision = decide(3, [(0, 9)], 0, policy)

    assert (decision.replicas, decision.changes) == (3, False)


@given(
    wishes=st.lists(st.integers(0, 10), min_size=1, max_size=60),
    window=st.integers(1, 30),
)
def test_replicas_never_fall_below_a_wish_of_the_last_window(
    wishes: list[int], window: int
) -> None:
    """Whatever the wishes (one a second), the replicas are never below any wish of the last
    `window` seconds: a dip in lag shorter than the window never scales down (no flapping),
    and every rise is followed at once."""
    policy = Autoscaling(
        min_replicas=0, max_replicas=10, scale_down_stabilization_s=window, scale_up_max_pods=10
    )
    current, history = wishes[0], []
    for t, wish in enumerate(wishes):
        history.append((float(t), wish))
        current = decide(current, history, float(t), policy).replicas
        recent = [w for s, w in history if t - s <= window]
        assert current == max(recent)  # never below a recent wish, never above them all


def test_time_lag_is_interpolated_from_the_log_end_history() -> None:
    ends = [(0.0, 0), (10.0, 100), (20.0, 200)]

    assert time_lag_s(ends, 200, 20) == 0.0
    assert time_lag_s(ends, 150, 20) == 5.0  # the end stood at 150 five seconds ago
    assert time_lag_s(ends, 50, 25) == 20.0
    assert time_lag_s([], 0, 0) is None


# -- issue 21: the autopilot's defects ---------------------------------------------------------


def test_a_restarted_operator_does_not_scale_down_before_it_has_watched_a_whole_window() -> None:
    """Defect 6: the first pass after a restart knows only the current wish; a busy fleet of
    10 is not scaled to 1 before the process has seen a whole scale-down window."""
    policy = Autoscaling(min_replicas=1, max_replicas=10, scale_down_stabilization_s=300)

    first = decide(10, [(0.0, 1)], 0.0, policy)
    assert (first.replicas, first.changes) == (10, False)
    history = [(0.0, 1), (299.0, 1)]
    assert decide(10, history, 299.0, policy).replicas == 10
    after = decide(10, [*history, (300.0, 1)], 300.0, policy)
    assert (after.replicas, after.reason) == (1, "ScaledDownAfterWindow")


def test_scale_up_is_bounded_by_the_hpa_style_policy_per_period() -> None:
    """Defect 8: at most 4 pods or 100 % per 15 s (the HPA's defaults), whichever is more."""
    policy = Autoscaling(min_replicas=1, max_replicas=50)

    assert decide(2, [(0.0, 40)], 0.0, policy).replicas == 6  # 2 + 4 pods beats 2 * 100 %
    assert decide(10, [(0.0, 40)], 0.0, policy).replicas == 20  # 100 % beats 4 pods
    assert decide(0, [(0.0, 40)], 0.0, policy).replicas == 4  # from zero: 4 pods
