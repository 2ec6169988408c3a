"""A pass writes a group's status only when it says something new: a condition, a decision, a
count. The live lag figures are the operator's metrics every pass and reach the status at most
every 30 s while they change, so a thousand groups at rest cost the API server no write."""

from __future__ import annotations

from typing import Any

from kafleet_operator.reconcile import observer

READY = {
    "type": "Ready",
    "status": "True",
    "reason": "Running",
    "message": "2 of 2 replicas ready",
    "observedGeneration": 1,
    "lastTransitionTime": "2026-11-26T07:00:00Z",
}
ACTIVE = {**READY, "type": "Active", "reason": "LagOverActivation", "message": "lag 500 over 0"}


def status(**changes: Any) -> dict[str, Any]:
    found = {
        "replicas": 2,
        "readyReplicas": 2,
        "lag": 500,
        "maxPartitionLag": 90,
        "timeLagSeconds": 3.5,
        "conditions": [READY, ACTIVE],
        "tuning": {"from": 500, "pods": 2, "latencySeconds": 0.012},
    }
    return {**found, **changes}


def test_a_pass_that_found_what_the_status_says_writes_nothing() -> None:
    assert not observer.worth_writing(status(), status(), since_s=3600)


def test_an_empty_pass_writes_nothing() -> None:
    assert not observer.worth_writing(status(), {}, since_s=3600)


def test_a_changed_count_condition_or_decision_is_written_at_once() -> None:
    degraded = {**READY, "type": "Degraded", "reason": "KafkaUnreachable"}
    for new in (
        status(readyReplicas=1),
        status(conditions=[READY, {**ACTIVE, "status": "False"}]),
        status(conditions=[READY, ACTIVE, degraded]),
        status(lastScaleTime="2026-11-26T07:01:00Z", lastScaleReason="ScaledUp"),
    ):
        assert observer.worth_writing(status(), new, since_s=0.1)


def test_moving_lag_figures_are_written_at_most_every_30_seconds() -> None:
    moved = status(lag=700, maxPartitionLag=120, timeLagSeconds=4.0)

    assert not observer.worth_writing(status(), moved, since_s=29)
    assert observer.worth_writing(status(), moved, since_s=observer.REFRESH_S)


def test_the_words_of_a_condition_and_the_handlers_latency_are_live_figures() -> None:
    reworded = status(
        conditions=[READY, {**ACTIVE, "message": "lag 700 over 0"}],
        tuning={"from": 500, "pods": 2, "latencySeconds": 0.02},
    )

    assert not observer.worth_writing(status(), reworded, since_s=5)
    assert observer.worth_writing(status(), reworded, since_s=30)


def test_a_field_the_status_lacks_is_news() -> None:
    assert observer.worth_writing({}, status(), since_s=0)


def test_a_field_written_none_reads_back_absent_and_is_not_news() -> None:
    """B9 found every group at rest written every pass: ``tuning.appliedMin: None`` is dropped
    by the merge patch, and the next pass read its absence as a change."""
    tuning = {"from": 500, "pods": 0, "appliedMin": None, "latencySeconds": None}
    kept = {"from": 500, "pods": 0}

    assert not observer.worth_writing(status(tuning=kept), status(tuning=tuning), since_s=60)
