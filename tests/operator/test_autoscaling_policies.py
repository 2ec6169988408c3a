"""The autopilot's policies added for issue 21, called directly (pure: no I/O).

Scale-up is sized from rates and waits for the last step's pods to be Ready; a read that
failed holds the replicas (or falls back, as KEDA's ``fallback``); persistent lag can be left
out; replicas can be snapped to a divisor of the partition count; the histories are sized by
time, not by count, and stay bounded in memory."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafleet_operator.policy import histories, scaling
from kafleet_operator.policy.autopilot import Autoscaling, Fallback


def test_being_behind_in_time_asks_what_the_measured_rates_need() -> None:
    """Defect 8: the step is sized from rates, not one replica per pass. 900 records/s come
    in, a replica commits 100/s: 9 keep up, and a backlog of 60,000 to clear within the 60 s
    target needs 10 more (1,000/s)."""
    policy = Autoscaling(max_replicas=50, lag_per_replica=100_000, target_time_lag_s=60)
    rates = scaling.Rates(input_per_s=900.0, per_replica_per_s=100.0)

    assert scaling.wanted(60_000, 50, policy, time_lag_s=90, current=2, rates=rates) == 19
    assert scaling.wanted(60_000, 50, policy, time_lag_s=30, current=2, rates=rates) == 1
    unmeasured = scaling.Rates(input_per_s=900.0, per_replica_per_s=None)
    assert scaling.wanted(60_000, 50, policy, time_lag_s=90, current=2, rates=unmeasured) == 3


def test_the_next_step_waits_until_the_last_steps_pods_are_ready() -> None:
    """Defect 8: 2 of 6 ready, so no step; all 6 ready, the next step is taken."""
    policy = Autoscaling(max_replicas=50)

    waiting = scaling.decide(6, [(0.0, 12)], 100.0, policy, ready=2, since_scale_s=10.0)
    assert (waiting.replicas, waiting.reason, waiting.changes) == (6, "WaitingForReadyPods", False)
    ready = scaling.decide(6, [(0.0, 12)], 100.0, policy, ready=6, since_scale_s=10.0)
    assert ready.replicas == 12
    # A pod that never gets ready does not block scaling for ever.
    late = scaling.decide(6, [(0.0, 12)], 100.0, policy, ready=2, since_scale_s=10_000.0)
    assert late.replicas == 12


def test_steps_within_one_period_share_its_budget() -> None:
    """1 -> 5 at t=0 used the 4 pods of the period: at t=10 nothing more, at t=16 more."""
    policy = Autoscaling(max_replicas=50, scale_up_period_s=15)
    steps = [(0.0, 1)]

    assert scaling.decide(5, [(10.0, 30)], 10.0, policy, steps=steps).replicas == 5
    assert scaling.decide(5, [(16.0, 30)], 16.0, policy, steps=steps).replicas == 10


def test_a_measured_group_goes_to_its_wish_in_one_step_and_an_unmeasured_one_is_paced() -> None:
    """Issue 36: the HPA's pace (4 pods or 100 % per 15 s) took a lag step on 12 partitions
    1 -> 5 -> 10 -> 12 over 30 s though the operator had measured what a replica commits."""
    policy = Autoscaling(max_replicas=12)

    measured = scaling.decide(1, [(0.0, 12)], 0.0, policy, rates_measured=True)
    assert (measured.replicas, measured.reason) == (12, "ScaledUpForLag")
    assert scaling.decide(1, [(0.0, 12)], 0.0, policy).replicas == 5
    paced = Autoscaling(max_replicas=12, scale_up_in_one_step=False)
    assert scaling.decide(1, [(0.0, 12)], 0.0, paced, rates_measured=True).replicas == 5


def test_one_step_still_waits_for_the_last_steps_pods_and_the_up_window() -> None:
    policy = Autoscaling(max_replicas=12, scale_up_stabilization_s=30)

    waiting = scaling.decide(4, [(0.0, 12)], 10.0, policy, ready=1, since_scale_s=5.0,
                             rates_measured=True)  # fmt: skip
    assert waiting.reason == "WaitingForReadyPods"
    lowest = scaling.decide(4, [(0.0, 6), (10.0, 12)], 10.0, policy, rates_measured=True)
    assert lowest.replicas == 6  # the lowest wish of the window, whole


def test_a_group_is_measured_once_what_one_replica_commits_is_known() -> None:
    assert not scaling.measured(None)
    assert not scaling.measured(scaling.Rates(input_per_s=50.0, per_replica_per_s=None))
    assert scaling.measured(scaling.Rates(input_per_s=50.0, per_replica_per_s=20.0))
    assert scaling.measured(scaling.Rates(50.0, per_replica_per_s=None, capacity_per_s=40.0))


def test_a_failed_read_holds_the_replicas_then_falls_back_after_the_threshold() -> None:
    """Defect 12 and KEDA's fallback: unknown is not zero."""
    plain = Autoscaling()
    assert scaling.unreadable(7, 100, plain) == scaling.Decision(7, "LagUnknown", 7)

    policy = Autoscaling(fallback=Fallback(failure_threshold=3, replicas=2))
    assert scaling.unreadable(7, 3, policy).replicas == 7  # KEDA: more failures than this
    assert scaling.unreadable(7, 4, policy) == scaling.Decision(2, "Fallback", 7)
    higher = Autoscaling(
        fallback=Fallback(failure_threshold=0, replicas=2, behavior="current_replicas_if_higher")
    )
    assert scaling.unreadable(7, 1, higher).replicas == 7
    assert scaling.unreadable(1, 1, higher).replicas == 2


def test_partitions_the_sidecars_judge_stopped_do_not_drive_scale_up_but_stalled_ones_do() -> None:
    # STALL is no commit in a 10 s window: what a handler slower than 10 s a record looks like,
    # and such a busy partition must still ask for replicas (review of issue 21).
    lag = {("orders", 0): 5_000, ("orders", 1): 300, ("orders", 2): 200}
    statuses = {"orders[0]": "STALL", "orders[1]": "OK", "orders[2]": "STOP"}

    assert scaling.driving_lag(lag, statuses) == 5_300
    assert scaling.driving_lag(lag, {}) == 5_500


@pytest.mark.parametrize(
    ("count", "partitions", "floor", "ceiling", "snapped"),
    [
        (3, 12, 1, 12, 3),
        (5, 12, 1, 12, 6),  # KEDA snaps up, to the next divisor
        (7, 12, 1, 12, 12),
        (7, 12, 1, 10, 6),  # the next divisor is over max_replicas: the largest under it
        (0, 12, 0, 12, 0),  # zero stays zero
        (3, 7, 1, 10, 7),  # a prime: one or all
        (3, 8, 3, 3, 3),  # no divisor within the bounds: as wished
    ],
)
def test_even_partitions_snaps_replicas_to_a_divisor_of_the_partition_count(
    count: int, partitions: int, floor: int, ceiling: int, snapped: int
) -> None:
    assert scaling.even(count, partitions, floor, ceiling) == snapped


def test_even_partitions_applies_to_the_wish() -> None:
    policy = Autoscaling(max_replicas=12, lag_per_replica=100, even_partitions=True)

    assert scaling.wanted(500, 12, policy) == 6
    assert scaling.wanted(500, 12, policy.model_copy(update={"even_partitions": False})) == 5


@given(
    wishes=st.lists(st.integers(0, 30), min_size=1, max_size=400),
    gaps=st.lists(st.floats(0.5, 40), min_size=400, max_size=400),
    window=st.integers(0, 3_000),
)
def test_the_compact_wish_history_answers_as_the_full_one(
    wishes: list[int], gaps: list[float], window: int
) -> None:
    """Kept by time and bounded (two values per distinct wish at most), the history gives
    every window ending now the same highest and lowest wish as the full history."""
    history = histories.Wishes(horizon_s=3_000)
    full: list[tuple[float, int]] = []
    now = 0.0
    for wish, gap in zip(wishes, gaps, strict=False):
        now += gap
        history.add(now, wish)
        full.append((now, wish))
        recent = [w for t, w in full if now - t <= window]
        kept = [w for t, w in history.samples() if now - t <= window]
        assert (max(kept), min(kept)) == (max(recent), min(recent))
    assert len(history.samples()) <= 2 * 31


def test_a_day_long_window_keeps_its_highest_wish_in_bounded_memory() -> None:
    history = histories.Wishes(horizon_s=86_400)
    for t in range(0, 86_400, 5):
        history.add(float(t), 9 if t == 10 else 1)

    assert max(w for _, w in history.samples()) == 9
    assert len(history.samples()) <= 4


def test_the_time_lag_history_covers_a_target_over_ten_minutes_in_bounded_memory() -> None:
    """120 passes were kept (10 min at 5 s): a 30 min target never triggered."""
    ends = histories.Offsets(horizon_s=histories.offsets_horizon_s(target_time_lag_s=1_800))
    for t in range(0, 3_600, 5):
        ends.add(float(t), 100 * t, 0)  # nothing committed for an hour

    lag = scaling.time_lag_s(ends.ends(), 0, 3_595.0)
    assert lag is not None
    assert lag > 1_800
    assert len(ends.samples) <= histories.MAX_SAMPLES


def _run(offsets: histories.Offsets, start: float, seconds: int, ready: int, rate: float) -> float:
    """Feed a pass every 5 s of ``ready`` replicas each committing ``rate`` records a second."""
    now = start
    committed = offsets.samples[-1].committed if offsets.samples else 0
    for _ in range(seconds // 5):
        now += 5
        committed += int(ready * rate * 5)
        offsets.add(now, 10**9, committed, ready, "orders")
    return now


def test_a_scale_up_does_not_inflate_one_replicas_measured_rate() -> None:
    """Review of issue 21: commits over a window were divided by its fewest ready replicas and
    the best rate kept for ten minutes, so after 2 -> 4 replicas of 100 records/s each a
    replica read 183 records/s, and the time-lag step asked for half the replicas needed."""
    offsets = histories.Offsets(600)
    now = _run(offsets, 0, 120, ready=2, rate=100)
    now = _run(offsets, now, 120, ready=4, rate=100)

    per_replica = offsets.rates(now)[1]

    assert per_replica is not None
    assert per_replica == pytest.approx(100, rel=0.05)


def test_a_new_topic_or_a_first_commit_starts_the_rates_again_rather_than_read_a_jump() -> None:
    """Review of issue 21: a topic appearing added its offsets to the sums, read as 66,668
    records/s produced and 33,334 committed by one replica."""
    offsets = histories.Offsets(600)
    for i in range(6):
        offsets.add(5.0 * i, 1_000 + 500 * i, 500 * i, 2, "orders")
    offsets.add(30.0, 4_000_000, 2_000_000, 2, "orders and payments")

    assert offsets.rates(30.0) == (None, None)


def test_a_fleet_that_keeps_up_with_its_input_is_not_shrunk_below_what_the_input_needs() -> None:
    """B8: at 200 records/s, ten replicas that keep up leave about 150 records of lag (what
    their queues hold), which alone wishes 2 replicas; 2 fall behind, and the lag brings them
    back up: a flap. A busy replica commits 40/s, so the input needs 6 (with 10% headroom)."""
    policy = Autoscaling(max_replicas=12, lag_per_replica=100)
    keeping_up = scaling.Rates(input_per_s=200.0, per_replica_per_s=20.0, capacity_per_s=40.0)
    never_busy = scaling.Rates(input_per_s=200.0, per_replica_per_s=20.0)

    assert scaling.wanted(150, 12, policy, current=10, rates=keeping_up) == 6
    assert scaling.wanted(150, 12, policy, current=10, rates=never_busy) == 2
    assert scaling.wanted(2_000, 12, policy, current=10, rates=keeping_up) == 12  # lag asks more
    idle = scaling.Rates(input_per_s=0.0, per_replica_per_s=None, capacity_per_s=40.0)
    assert scaling.wanted(0, 12, policy, current=10, rates=idle) == 1  # no input: min_replicas


def test_what_the_input_needs_holds_a_fleet_but_never_grows_it() -> None:
    """Review: a 30 s input rate read a burst as steady input and grew the fleet past what
    lag_per_replica asked, and the scale-down window then held it there."""
    policy = Autoscaling(max_replicas=12, lag_per_replica=1000)
    burst = scaling.Rates(input_per_s=67.0, per_replica_per_s=10.0, capacity_per_s=10.0)

    assert scaling.wanted(1_500, 12, policy, current=2, rates=burst) == 2


def test_a_fleet_that_may_scale_to_zero_is_held_while_it_keeps_up() -> None:
    policy = Autoscaling(min_replicas=0, max_replicas=12, lag_per_replica=100, activation_lag=500)
    keeping_up = scaling.Rates(input_per_s=200.0, per_replica_per_s=20.0, capacity_per_s=40.0)

    assert scaling.wanted(150, 12, policy, current=10, rates=keeping_up) == 6
    assert scaling.wanted(150, 12, policy, current=0, rates=keeping_up) == 0  # not started by it
    assert scaling.wanted(150, 12, policy, current=10, rates=None) == 0


def test_a_replicas_capacity_is_measured_only_while_the_fleet_has_work_waiting() -> None:
    offsets = histories.Offsets(600)
    now = _run(offsets, 0, 60, ready=1, rate=40)  # a backlog: one replica flat out
    committed = offsets.samples[-1].committed
    for _ in range(24):  # then ten replicas keeping up with 200/s, 150 records behind
        now += 5
        committed += 1_000
        offsets.add(now, committed + 150, committed, 10, "orders")

    assert offsets.capacity(now, busy_lag_per_replica=100) == pytest.approx(40, rel=0.05)


def test_a_fleet_never_busy_has_no_measured_capacity() -> None:
    offsets = histories.Offsets(600)
    committed = 0
    for t in range(0, 120, 5):
        committed += 100
        offsets.add(float(t), committed + 10, committed, 2, "orders")

    assert offsets.rates(120.0)[1] == pytest.approx(10, rel=0.05)  # the input shared out
    assert offsets.capacity(120.0, busy_lag_per_replica=100) is None


def test_a_replicas_capacity_outlives_its_busy_samples_until_the_partitions_change() -> None:
    offsets = histories.Offsets(600)
    now = _run(offsets, 0, 60, ready=1, rate=40)
    committed = offsets.samples[-1].committed
    for _ in range(240):  # twenty minutes of keeping up, never busy again; a pass each 5 s
        now += 5
        committed += 1_000
        offsets.add(now, committed + 150, committed, 10, "orders", lag=150)
        offsets.capacity(now, busy_lag_per_replica=100)

    assert offsets.capacity(now, busy_lag_per_replica=100) == pytest.approx(40, rel=0.05)
    offsets.add(now + 5, 0, 0, 10, "orders and payments")
    assert offsets.capacity(now + 5, busy_lag_per_replica=100) is None


def test_busy_is_judged_on_the_lag_the_pass_read_not_on_uncommitted_logs() -> None:
    """Review: a partition without a commit added its whole log to end minus committed, so
    a fleet that kept up looked busy and its input shared out read as its capacity."""
    offsets = histories.Offsets(600)
    committed = 0
    for t in range(0, 120, 5):
        committed += 100
        offsets.add(float(t), committed + 50_000, committed, 2, "orders", lag=10)

    assert offsets.capacity(120.0, busy_lag_per_replica=100) is None
