"""The tuning policy, called directly: max_poll_records moves towards what keeps the handlers
fed between two polls, in bounded steps, never outside what the worker accepts; a tuning holds
only while the spec's value is the one it started from; latency is read over the window
between two passes; and no step is taken while the last one is on its way to the pods."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from kafleet.config.loading import load_config
from kafleet_operator.policy import builders, tuning
from kafleet_operator.policy.autopilot import Tuning
from kafleet_operator.policy.spec import parse_spec
from kafleet_operator.policy.tuning import Counters, Tuned, bounds, carried, step, target, window

OWNER = {"metadata": {"name": "t", "namespace": "n", "uid": "u"}}


def spec(**fields: Any) -> dict[str, Any]:
    return {
        "image": "registry.example.com/worker:1",
        "handler": "orders:bill",
        "bootstrap_servers": "kafka:9092",
        "group_id": "g",
        "topics": ["t"],
        **fields,
    }


@given(
    current=st.integers(10, 5000),
    latency=st.floats(1e-5, 30),
    concurrency=st.integers(1, 256),
    interval=st.floats(0.001, 1),
)
def test_tuning_moves_towards_the_target_in_bounded_steps(
    current: int, latency: float, concurrency: int, interval: float
) -> None:
    policy = Tuning()
    limits = (policy.min_max_poll_records, policy.max_max_poll_records)
    move = step(current, latency, concurrency, interval, limits, policy)
    goal = target(latency, concurrency, interval, policy)

    assert policy.min_max_poll_records <= move.max_poll_records <= policy.max_max_poll_records
    assert current / policy.max_step - 1 <= move.max_poll_records <= current * policy.max_step
    if move.changes:  # towards the goal (or back inside the bounds)
        clamped_goal = max(policy.min_max_poll_records, min(policy.max_max_poll_records, goal))
        assert (move.max_poll_records - current) * (clamped_goal - current) > 0


def test_slow_handlers_lower_max_poll_records_and_fast_ones_raise_it() -> None:
    policy = Tuning(poll_intervals=2)
    limits = (10, 5000)

    # 200 ms a record over 4 handlers: 1 record per 50 ms poll interval, 2 with the margin.
    slow = step(500, 0.2, 4, 0.05, limits, policy)
    # 1 ms over 16 handlers: 800 records per interval, 1,600 with the margin.
    fast = step(100, 0.001, 16, 0.05, limits, policy)

    assert (slow.max_poll_records, slow.reason) == (250, "LoweredForSlowHandlers")
    assert (fast.max_poll_records, fast.reason) == (200, "RaisedForFastHandlers")
    assert step(500, None, 4, 0.05, limits, policy).changes is False  # nothing measured yet
    assert step(100, 0.001, 16, 0.05, (10, 150), policy).max_poll_records == 150  # the bound


def test_a_value_outside_the_bounds_comes_back_inside_without_figures() -> None:
    move = step(2000, None, 4, 0.05, (10, 1000), Tuning())

    assert (move.max_poll_records, move.reason) == (1000, "ClampedToBounds")


@pytest.mark.parametrize(
    ("queue_max", "policy", "expected"),
    [
        (5000, Tuning(), (10, 5000)),
        (1000, Tuning(), (10, 1000)),  # the worker refuses more than queue.max_records
        (5, Tuning(), (5, 5)),  # ... and its bound wins over the policy's floor
        (1_000_000, Tuning(max_max_poll_records=100_000), (10, 100_000)),
    ],
)
def test_the_bounds_are_the_policys_within_what_the_worker_accepts(
    queue_max: int, policy: Tuning, expected: tuple[int, int]
) -> None:
    worker = parse_spec(spec(queue={"max_records": queue_max}, max_poll_records=5)).worker

    assert bounds(worker, policy) == expected


def test_a_share_groups_tuning_never_asks_for_more_records_than_its_handlers_take() -> None:
    share = spec(
        image="registry.example.com/kafleet-spark:1",
        group_type="share",
        concurrency=12,
        share={"consumers": 2},
    )
    worker = parse_spec(share).worker

    assert bounds(worker, Tuning()) == (min(Tuning().min_max_poll_records, 6), 6)


@pytest.mark.parametrize(
    ("spec_value", "tuned", "expected"),
    [
        (500, None, Tuned(500, 500, 99.0)),  # nothing tuned yet: start from the spec
        (500, Tuned(250, 500, 1.0), Tuned(250, 500, 1.0)),  # the tuning holds
        (200, Tuned(500, 500, 1.0), Tuned(200, 200, 99.0)),  # the spec changed: start again
    ],
)
def test_a_tuning_holds_only_while_the_spec_value_is_the_one_it_started_from(
    spec_value: int, tuned: Tuned | None, expected: Tuned
) -> None:
    parsed = parse_spec(spec(max_poll_records=spec_value))

    assert carried(parsed.worker, parsed.fleet.tuning, tuned, 99.0) == expected


def test_with_tuning_off_the_spec_value_holds() -> None:
    parsed = parse_spec(spec(max_poll_records=200, tuning={"enabled": False}))

    assert carried(parsed.worker, parsed.fleet.tuning, Tuned(500, 200, 1.0), 99.0) is None


def test_a_tuned_value_above_a_tightened_queue_bound_builds_a_config_the_worker_loads(
    tmp_path: Path,
) -> None:
    parsed = parse_spec(spec(queue={"max_records": 1000}))
    held = carried(parsed.worker, parsed.fleet.tuning, Tuned(2000, 500, 1.0), 99.0)
    assert held == Tuned(1000, 500, 99.0)  # clamped, and stamped: a change for the pods

    data = builders.config_map(OWNER, parsed, held.value)["data"]["worker.yaml"]
    path = tmp_path / "worker.yaml"
    path.write_text(data)

    assert load_config(path).max_poll_records == 1000  # the worker starts (it exited 2)
    assert yaml.safe_load(data)["max_poll_records"] == 1000


def test_latency_is_read_over_the_window_between_two_passes() -> None:
    hours_of_fast = {"a": Counters(1_000_000, 1_000.0, 3600.0)}  # 1 ms each, for an hour
    then_slow = {"a": Counters(1_000_020, 1_004.0, 3601.0)}  # 20 records at 200 ms

    latency, records = window(hours_of_fast, then_slow)

    assert records == 20
    assert latency == pytest.approx(0.2)  # the cumulative mean says 1.004 ms


@pytest.mark.parametrize(
    ("before", "now"),
    [
        ({}, {"a": Counters(50, 10.0, 5.0)}),  # a pod new to the window (or newly ready)
        ({"a": Counters(900, 90.0, 600.0)}, {"a": Counters(50, 10.0, 5.0)}),  # restarted
        ({"a": Counters(40, 4.0, 600.0)}, {"a": Counters(50, 10.0, 5.0)}),  # restarted, busy
    ],
)
def test_a_new_or_restarted_pod_counts_from_the_next_pass(
    before: dict[str, Counters], now: dict[str, Counters]
) -> None:
    assert window(before, now) == (None, 0)


def test_each_pods_window_is_counted_and_a_gone_pod_is_forgotten() -> None:
    before = {"a": Counters(10, 1.0), "b": Counters(0, 0.0), "gone": Counters(5, 5.0)}
    now = {"a": Counters(20, 2.0), "b": Counters(30, 9.0)}

    latency, records = window(before, now)

    assert records == 40
    assert latency == pytest.approx(0.25)


@pytest.mark.parametrize(
    ("applied", "age_s", "waiting"),
    [
        ([500, 500], 5.0, True),  # the kubelet has not delivered it yet
        ([250, 500], 5.0, True),  # one pod has
        ([250, 250], 5.0, False),  # every ready pod applied it
        ([], 5.0, True),  # no pod says anything yet
        ([500, 500], tuning.APPLY_TIMEOUT_S, False),  # waited long enough: go on
    ],
)
def test_no_step_is_taken_until_every_ready_pod_applied_the_last_one(
    applied: list[int], age_s: float, waiting: bool
) -> None:
    assert tuning.awaiting(250, applied, 1000.0, 1000.0 + age_s) is waiting
