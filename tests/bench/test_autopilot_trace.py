"""B8's trace and the figures of a run (``bench/autopilot_trace.py``)."""

from __future__ import annotations

from bench.autopilot_trace import Sample, Trace, summarise

TRACE = Trace(steady_per_s=20, steady_s=60, burst_s=120, idle_s=240)


def test_the_trace_is_steady_then_ten_times_for_the_burst_then_idle() -> None:
    assert [TRACE.rate(t) for t in (0, 59.9, 60, 179.9, 180, 400)] == [20, 20, 200, 200, 0, 0]
    assert TRACE.due(30) == 600
    assert TRACE.due(70) == 1200 + 2000
    assert TRACE.due(1000) == 1200 + 24_000
    assert TRACE.total_s == 420


def _run(points: list[tuple[float, int, int]]) -> list[Sample]:
    return [Sample(t, wished, wished, wished, lag) for t, wished, lag in points]


def test_a_run_up_then_down_has_no_reversal_beyond_its_one_fall_and_no_flap() -> None:
    samples = _run(
        [(0, 1, 5), (60, 1, 5), (65, 1, 900), (70, 5, 1500), (85, 10, 1200), (180, 10, 400),
         (200, 10, 50), (260, 2, 0), (270, 1, 0), (420, 1, 0)]
    )  # fmt: skip
    figures = summarise(samples, TRACE, threshold=100)
    assert figures.first_scale_up_s == 10
    assert figures.drained_s == 20  # 200 s in: the first sample under 100 after the burst (180)
    assert figures.max_lag == 1500
    assert figures.max_replicas == 10
    assert (figures.scale_events, figures.reversals, figures.flaps) == (4, 1, 0)


def test_a_scale_up_after_a_scale_down_is_a_flap() -> None:
    samples = _run([(0, 1, 0), (70, 4, 900), (100, 2, 100), (130, 6, 900), (300, 1, 0)])
    figures = summarise(samples, TRACE, threshold=100)
    assert (figures.scale_events, figures.reversals, figures.flaps) == (4, 3, 1)


def test_replica_seconds_count_the_pods_that_exist_over_time() -> None:
    samples = [Sample(0, 1, 1, 1, 0), Sample(10, 3, 3, 1, 0), Sample(20, 3, 3, 3, 0)]
    assert summarise(samples, TRACE, 100).replica_seconds == 1 * 10 + 3 * 10


def test_a_run_that_never_scales_or_drains_says_so() -> None:
    figures = summarise(_run([(0, 1, 0), (200, 1, 5000)]), TRACE, threshold=100)
    assert figures.first_scale_up_s is None
    assert figures.drained_s is None


def test_a_scale_up_that_may_have_come_before_the_burst_is_not_the_bursts() -> None:
    samples = _run([(59.5, 1, 5), (60.5, 2, 5), (61.5, 2, 900), (66.5, 4, 900), (200, 4, 0)])
    assert summarise(samples, TRACE, threshold=100).first_scale_up_s == 6.5
