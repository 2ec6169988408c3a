"""The model of KEDA's Kafka scaler and the HPA (``bench/keda_hpa.py``) behaves as the real pair
did on this machine (``../shared/KEDA.md``: 1 -> 4 at the first sync, 4 -> 8 at the next, and
no more than the partitions), and as their documented rules say."""

from __future__ import annotations

from bench.keda_hpa import KedaHpa, Settings, desired, metric, partition_lag, scale_up_limit

EIGHT = dict.fromkeys(range(8), 1250)  # 10,000 records over 8 partitions


def test_a_partition_without_a_commit_counts_as_keda_counts_it() -> None:
    assert partition_lag(500, None, Settings(offset_reset_latest=True)) == 1
    latest_zero = Settings(offset_reset_latest=True, scale_to_zero_on_invalid_offset=True)
    assert partition_lag(500, None, latest_zero) == 0
    assert partition_lag(500, None, Settings(offset_reset_latest=False)) == 500
    assert partition_lag(500, 200, Settings()) == 300


def test_the_metric_is_capped_at_partitions_times_the_threshold() -> None:
    settings = Settings(lag_threshold=100)
    assert metric(EIGHT, dict.fromkeys(range(8), 0), settings) == 800
    idle = Settings(lag_threshold=100, allow_idle_consumers=True)
    assert metric(EIGHT, dict.fromkeys(range(8), 0), idle) == 10_000


def test_a_lag_just_over_the_cap_is_not_capped_as_go_divides_integers() -> None:
    settings = Settings(lag_threshold=100)
    ends = dict.fromkeys(range(8), 100)
    ends[0] = 150  # 850 in all: 850 // 100 == 8, not more than the 8 partitions
    assert metric(ends, dict.fromkeys(range(8), 0), settings) == 850
    assert desired(850, 1, settings) == 9


def test_the_tolerance_is_judged_against_the_pods_the_status_counts() -> None:
    hpa = KedaHpa(Settings(lag_threshold=100))
    assert hpa.sync(0.0, 800, 8) is None
    # spec.replicas 8, status.replicas 4: 420 is within 10% of the target for those 4 pods, so
    # the HPA recommends the 4 (judged against spec's 8 it would have said ceil(4.2) = 5)
    assert hpa.sync(15.0, 420, 8, status_replicas=4) is None  # 8 is still within the window
    assert hpa.recommendations[-1] == (15.0, 4)


def test_a_scale_up_at_most_doubles_or_reaches_four() -> None:
    assert [scale_up_limit(n) for n in (0, 1, 2, 3, 8)] == [4, 4, 4, 6, 16]


def test_a_lag_step_goes_1_4_8_a_sync_apart_and_stops_at_the_partitions() -> None:
    hpa = KedaHpa(Settings(lag_threshold=100, max_replicas=20))
    lag = metric(EIGHT, dict.fromkeys(range(8), 0), hpa.settings)
    replicas, seen = 1, []
    for now in (0.0, 15.0, 30.0, 45.0):
        assert hpa.due(now)
        written = hpa.sync(now, lag, replicas)
        replicas = written or replicas
        seen.append(written)
    assert seen == [4, 8, None, None]


def test_syncs_come_every_sync_period() -> None:
    hpa = KedaHpa(Settings())
    hpa.sync(0.0, 0, 1)
    assert not hpa.due(14.9)
    assert hpa.due(15.0)


def test_scale_down_waits_for_the_highest_recommendation_of_the_window_to_age_out() -> None:
    hpa = KedaHpa(Settings(lag_threshold=100, down_window_s=300))
    assert hpa.sync(0.0, 800, 8) is None  # at target
    for now in range(15, 300, 15):
        assert hpa.sync(float(now), 0, 8) is None, now  # 8 is still within the window
    assert hpa.sync(315.0, 0, 8) == 1  # then straight down: no rate limit on the way down


def test_a_dip_within_the_window_never_scales_down() -> None:
    hpa = KedaHpa(Settings(lag_threshold=100))
    hpa.sync(0.0, 800, 8)
    assert hpa.sync(15.0, 100, 8) is None
    assert hpa.sync(30.0, 800, 8) is None


def test_cached_polls_make_the_hpa_see_a_value_up_to_a_polling_interval_old() -> None:
    hpa = KedaHpa(Settings(lag_threshold=100, hpa_reads_kafka=False, polling_interval_s=30))
    assert hpa.sync(0.0, 0, 1) is None
    assert hpa.sync(15.0, 800, 1) is None  # KEDA still holds the poll of t=0
    assert hpa.sync(30.0, 800, 1) == 4


def test_min_and_max_replicas_bound_every_write() -> None:
    hpa = KedaHpa(Settings(lag_threshold=100, min_replicas=2, max_replicas=3))
    assert hpa.sync(0.0, 800, 2) == 3
    hpa = KedaHpa(Settings(lag_threshold=100, min_replicas=2, down_window_s=0))
    assert hpa.sync(0.0, 0, 5) == 2
