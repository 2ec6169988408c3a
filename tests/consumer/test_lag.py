"""Lag is judged like Burrow: OK, WARN (falling behind), STALL (lagging, not moving), STOP (no
commits for too long), REWIND (the committed offset went back)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafleet.sidecar.lag import LagWindow, Sample, judge


def window(*points: tuple[int, int], every: float = 10.0) -> list[Sample]:
    """Samples ``every`` seconds apart from (committed, end) pairs."""
    return [Sample(i * every, committed, end) for i, (committed, end) in enumerate(points)]


@pytest.mark.parametrize(
    ("points", "status"),
    [
        ([], "OK"),
        ([(100, 100)], "OK"),
        ([(10, 50), (20, 60), (30, 70)], "OK"),  # lagging, but keeping pace
        ([(10, 50), (20, 50), (50, 50)], "OK"),  # caught up
        ([(10, 50), (20, 50), (40, 45)], "OK"),  # lag shrinking
        ([(10, 50), (20, 70), (30, 90)], "WARN"),  # moving, but lag grows 40 -> 50 -> 60
        ([(10, 50), (10, 50), (10, 50)], "STALL"),  # lagging and not moving
        ([(10, 50), (10, 60), (10, 70)], "STALL"),  # not moving while lag grows: worse than WARN
        ([(10, 50), (20, 50), (15, 50)], "REWIND"),
        ([(10, 50), (20, 60)], "OK"),  # two samples show no trend
        ([(10, 10), (10, 20), (10, 30)], "STALL"),  # lag appears and nothing moves
    ],
)
def test_a_window_is_judged(points: list[tuple[int, int]], status: str) -> None:
    assert judge(window(*points), stop_after_s=1000) == status


def test_lag_without_a_move_for_longer_than_stop_after_is_stop() -> None:
    stuck = window((10, 50), (10, 50), (10, 50), every=30)  # 60 s without a move

    assert judge(stuck, stop_after_s=45) == "STOP"
    assert judge(stuck, stop_after_s=90) == "STALL"


def test_stop_counts_from_the_last_move_even_before_the_window() -> None:
    recent = window((10, 50), (10, 50), (10, 50), every=1)

    assert judge(recent, stop_after_s=30, moved_at=-100) == "STOP"
    assert judge(recent, stop_after_s=30, moved_at=None) == "STALL"


def test_no_lag_is_ok_however_long_nothing_moved() -> None:
    idle = window((50, 50), (50, 50), (50, 50), every=100)

    assert judge(idle, stop_after_s=10) == "OK"


@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 1000)), max_size=12))
def test_a_committed_offset_that_never_goes_back_is_never_rewind(
    points: list[tuple[int, int]],
) -> None:
    committed = sorted(c for c, _ in points)
    samples = window(*[(c, max(c, e)) for c, (_, e) in zip(committed, points, strict=True)])

    assert judge(samples, stop_after_s=50) != "REWIND"


@given(st.lists(st.integers(0, 1000), min_size=1, max_size=12))
def test_a_consumer_that_is_always_caught_up_is_always_ok(ends: list[int]) -> None:
    ends = sorted(ends)

    assert judge(window(*[(e, e) for e in ends]), stop_after_s=1) == "OK"


def test_the_window_keeps_its_size_and_remembers_the_last_move() -> None:
    lag = LagWindow(size=3)
    for at, committed in [(0, 5), (1, 6), (2, 6), (3, 6), (4, 6), (5, 6)]:
        lag.add(Sample(at, committed, 100))
    lag.add(Sample(5, 7, 100))  # the same instant again: ignored

    assert [s.at for s in lag.samples] == [3, 4, 5]
    assert lag.moved_at == 1
    assert lag.judge(stop_after_s=3) == "STOP"
    assert lag.judge(stop_after_s=10) == "STALL"
