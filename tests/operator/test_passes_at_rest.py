"""A group at rest: a pass whose inputs are those of the last full pass, which found nothing to
do, stops after comparing them (``quiet.py``); anything that could make a pass act (a log end
moving, a commit behind, a new resourceVersion of the group or its Deployment, a pod, a
scale-down window running, a tuning change on its way, a minute gone by) makes a full pass."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from kafleet_operator.policy import histories, scaling
from kafleet_operator.reading import snapshots, watched
from kafleet_operator.reconcile import autoscaler, periodic, quiet
from tests.operator.conftest import Passes

WANT = snapshots.Want("g", ("t",))
PODS = [("10.0.0.1", "w-0")]


def snapshot(ends: tuple[int, int] = (10, 20), committed: tuple[int | None, int] = (10, 20)) -> Any:
    return snapshots.Snapshot(
        topics={"t": (0, 1)},
        ends={("t", 0): ends[0], ("t", 1): ends[1]},
        committed={"g": {("t", 0): committed[0], ("t", 1): committed[1]}},
    )


BODY = {"metadata": {"namespace": "ns", "name": "cg", "uid": "u", "resourceVersion": "7"}}


@pytest.fixture
def objects(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The operator's watched Deployment and pods of the group, as a test sets them."""
    held: dict[str, Any] = {"deployment": {"metadata": {"resourceVersion": "3"}}, "pods": PODS}
    monkeypatch.setattr(watched, "deployment", lambda ns, name: held["deployment"])
    monkeypatch.setattr(watched, "ready_pods", lambda ns, name: list(held["pods"]))
    return held


def pass_of(memo: dict[str, Any], reading: Any, body: Any = BODY, want: Any = WANT) -> Any:
    memo[periodic.KAFKA] = (reading, want)
    return quiet.inputs(body, memo)


def at_rest(memo: dict[str, Any] | None = None) -> dict[str, Any]:
    """A memo whose last full pass found the group at rest."""
    memo = memo if memo is not None else {}
    memo[quiet.SCALING], memo[quiet.TUNING], memo[quiet.LEVEL] = True, tuple(PODS), True
    quiet.after(memo, pass_of(memo, snapshot()), settled=True)
    memo.pop(periodic.KAFKA)
    return memo


def test_a_pass_with_the_inputs_of_a_full_pass_at_rest_stops_and_takes_the_snapshot(
    objects: dict[str, Any],
) -> None:
    memo = at_rest()
    taken = pass_of(memo, snapshot())

    assert quiet.unchanged(memo, taken)
    assert periodic.KAFKA not in memo  # the next pass reads the next snapshot, not this one


@pytest.mark.parametrize(
    "change",
    [
        "a log end moved",
        "a commit behind its log end",
        "the group changed",
        "the Deployment changed",
        "a pod became ready",
        "no Deployment",
        "the lag unread",
        "a share group",
    ],
)
def test_anything_a_pass_could_act_on_makes_a_full_pass(
    objects: dict[str, Any], change: str
) -> None:
    memo = at_rest()
    reading: Any = snapshot()
    body: Any = BODY
    want = WANT
    if change == "a log end moved":
        reading = snapshot(ends=(11, 20), committed=(11, 20))
    elif change == "a commit behind its log end":
        reading = snapshot(ends=(10, 20), committed=(9, 20))
    elif change == "the group changed":
        body = {"metadata": {**BODY["metadata"], "resourceVersion": "8"}}
    elif change == "the Deployment changed":
        objects["deployment"] = {"metadata": {"resourceVersion": "4"}}
    elif change == "a pod became ready":
        objects["pods"] = [*PODS, ("10.0.0.2", "w-1")]
    elif change == "no Deployment":
        objects["deployment"] = None
    elif change == "the lag unread":
        reading = RuntimeError("the cluster is down")
    elif change == "a share group":
        want = snapshots.Want("g", ("t",), share=True)

    assert not quiet.unchanged(memo, pass_of(memo, reading, body, want))
    assert periodic.KAFKA in memo  # left for the full pass


def test_a_partition_never_committed_is_not_at_rest(objects: dict[str, Any]) -> None:
    assert pass_of({}, snapshot(committed=(None, 20))) is None


def test_a_group_at_rest_still_has_a_full_pass_every_minute(
    objects: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    memo = at_rest()
    monkeypatch.setattr(quiet, "MAX_S", 0.0)

    assert not quiet.unchanged(memo, pass_of(memo, snapshot()))


MEASURED, NEW_POD = tuple(PODS), (*PODS, ("10.0.0.2", "w-1"))


@pytest.mark.parametrize(
    ("scaling", "tuning", "level", "settled"),
    [
        (False, MEASURED, True, True),  # a window running, or input held for
        (True, None, True, True),  # a tuning change on its way, or a handler run
        (True, NEW_POD, True, True),  # the tuner's measure was of other pods
        (True, MEASURED, False, True),  # a drift found (put back or not)
        (True, MEASURED, True, False),  # the status did not say it all
        (None, MEASURED, True, True),  # no verdict from the autoscaler
    ],
)
def test_a_full_pass_leaves_the_group_at_rest_only_when_nothing_moves_by_time_or_is_unsaid(
    objects: dict[str, Any],
    scaling: bool | None,
    tuning: tuple[tuple[str, str], ...] | None,
    level: bool,
    settled: bool,
) -> None:
    memo: dict[str, Any] = {quiet.TUNING: tuning, quiet.LEVEL: level}
    if scaling is not None:
        memo[quiet.SCALING] = scaling
    quiet.after(memo, pass_of(memo, snapshot()), settled)

    assert not quiet.unchanged(memo, pass_of(memo, snapshot()))


def test_a_failed_full_pass_ends_the_rest(objects: dict[str, Any]) -> None:
    memo = at_rest()
    quiet.after(memo, None, False)

    assert not quiet.unchanged(memo, pass_of(memo, snapshot()))


def test_a_group_without_autoscaling_restarts_its_scale_down_window_at_a_pass_at_rest(
    objects: dict[str, Any],
) -> None:
    memo = at_rest({"offsets": histories.Offsets(600), "wishes": histories.Wishes(300)})
    memo[quiet.SCALING], memo["watched_since"] = quiet.UNSCALED, 0.0
    quiet.after(memo, pass_of(memo, snapshot()), settled=True)

    assert quiet.unchanged(memo, pass_of(memo, snapshot()))
    autoscaler.at_rest(memo)
    assert memo["watched_since"] > 0.0


def test_a_lag_after_rest_is_timed_from_the_pass_before_it_not_from_the_rest_s_start() -> None:
    offsets = histories.Offsets(600)
    offsets.add(0.0, 1000, 1000)  # the last full pass, at rest
    offsets.again(55.0)  # passes at rest since
    offsets.add(60.0, 1010, 1000)  # a record, not yet committed

    assert scaling.time_lag_s(offsets.ends(), 1000, 60.0) <= 5.0


def test_the_wishes_of_the_rest_stay_in_a_scale_up_window() -> None:
    wishes = histories.Wishes(30)
    wishes.add(0.0, 2)  # the last full pass, at rest
    wishes.again(55.0)  # passes at rest since
    wishes.add(57.0, 5)  # a burst

    assert (55.0, 2) in wishes.samples()  # a 30 s up-window at 57 s still holds the 2


AUTOSCALING = {"min_replicas": 1, "max_replicas": 8, "lag_per_replica": 100}


def test_the_autoscaler_finds_a_group_at_its_wish_with_no_lag_at_rest(
    lag_passes: Callable[..., Passes],
) -> None:
    passes = lag_passes(WANT, 1, AUTOSCALING)
    passes.observe(snapshot())

    assert passes.memo[quiet.SCALING] is True


def test_a_scale_down_window_running_is_not_rest(lag_passes: Callable[..., Passes]) -> None:
    passes = lag_passes(WANT, 4, AUTOSCALING)  # no lag wishes 1: the window runs, by time
    passes.observe(snapshot())

    assert passes.decisions[-1].reason == "WatchingBeforeScaleDown"
    assert passes.memo[quiet.SCALING] is False


def test_lag_or_input_within_the_rates_window_is_not_rest(
    lag_passes: Callable[..., Passes],
) -> None:
    passes = lag_passes(WANT, 1, AUTOSCALING)
    passes.observe(snapshot(ends=(10, 20), committed=(5, 20)))
    assert passes.memo[quiet.SCALING] is False  # lag

    time.sleep(0.01)
    passes.observe(snapshot(ends=(50, 20), committed=(50, 20)))  # caught up, the input moved
    assert passes.memo[quiet.SCALING] is False
    time.sleep(0.01)
    passes.observe(snapshot(ends=(50, 20), committed=(50, 20)))
    assert passes.memo[quiet.SCALING] is False  # the input is still in the rates' window


def test_a_group_without_autoscaling_is_unscaled(lag_passes: Callable[..., Passes]) -> None:
    passes = lag_passes(WANT, 2, None)
    passes.observe(snapshot())

    assert passes.memo[quiet.SCALING] == quiet.UNSCALED
