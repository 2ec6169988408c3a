"""A ConsumerGroup's conditions, judged without a cluster: every state gets Ready, Progressing
and Degraded with a reason and a message (an absent Deployment and a refused apply included),
and a condition keeps its transition time while its status stays."""

from __future__ import annotations

from kafleet_operator.conditions import Facts, condition, judge, merged


def by_type(facts: Facts) -> dict[str, dict[str, object]]:
    return {c["type"]: c for c in judge(facts)}


def test_an_applied_group_with_every_replica_ready_is_ready_and_not_degraded() -> None:
    conditions = by_type(Facts(3, applied=3, replicas=2, ready=2))

    assert conditions["Ready"]["status"] == "True"
    assert conditions["Ready"]["message"] == "2 of 2 replicas ready"
    assert conditions["Progressing"]["reason"] == "Applied"
    assert conditions["Degraded"]["status"] == "False"


def test_an_invalid_spec_is_degraded_naming_the_field_and_not_ready() -> None:
    conditions = by_type(Facts(2, invalid="resources.limits.cpu: not a Kubernetes quantity"))

    assert conditions["Degraded"]["status"] == "True"
    assert conditions["Degraded"]["reason"] == "InvalidSpec"
    assert "resources.limits.cpu" in str(conditions["Degraded"]["message"])
    assert conditions["Ready"]["status"] == "False"


def test_without_a_deployment_every_condition_is_still_written() -> None:
    conditions = by_type(Facts(1, applied=None, replicas=None))

    assert set(conditions) == {"Ready", "Progressing", "Degraded"}
    assert conditions["Ready"]["status"] == "False"
    assert conditions["Ready"]["reason"] == "NoDeployment"
    assert conditions["Progressing"]["reason"] == "Reconciling"


def test_a_refused_apply_is_degraded_with_the_api_servers_message() -> None:
    message = 'Deployment.apps "billing" is invalid: spec.template.spec.serviceAccountName: ...'
    lag_fine = condition("Degraded", False, "Observed", "lag read from Kafka", 4)

    conditions = by_type(Facts(4, apply_failure=message, applied=3, replicas=None, lag=lag_fine))

    assert conditions["Degraded"]["status"] == "True"
    assert conditions["Degraded"]["reason"] == "ApplyFailed"
    assert conditions["Degraded"]["message"] == message
    assert conditions["Progressing"]["status"] == "False"
    assert "refused" in str(conditions["Ready"]["message"])


def test_a_refused_apply_leaves_the_previous_generations_pods_counted() -> None:
    conditions = by_type(Facts(4, apply_failure="refused", applied=3, replicas=2, ready=2))

    assert conditions["Ready"]["status"] == "True"  # generation 3's pods still serve
    assert conditions["Degraded"]["reason"] == "ApplyFailed"


def test_what_reading_the_lag_found_is_the_degraded_condition() -> None:
    unreachable = condition("Degraded", True, "KafkaUnreachable", "cannot read lag", 1)

    conditions = by_type(Facts(1, applied=1, replicas=1, ready=1, lag=unreachable))

    assert conditions["Degraded"] == unreachable


def test_a_condition_keeps_its_transition_time_while_its_status_stays() -> None:
    old = {**condition("Ready", True, "AllReplicasReady", "1 of 1", 1), "lastTransitionTime": "t0"}
    degraded = {**condition("Degraded", False, "Observed", "", 1), "lastTransitionTime": "t0"}

    now = merged(
        [old, degraded],
        [
            condition("Ready", True, "AllReplicasReady", "2 of 2", 2),
            condition("Degraded", True, "KafkaUnreachable", "", 2),
        ],
    )

    ready, flipped = {c["type"]: c for c in now}["Ready"], {c["type"]: c for c in now}["Degraded"]
    assert ready["lastTransitionTime"] == "t0"
    assert ready["message"] == "2 of 2"
    assert flipped["lastTransitionTime"] != "t0"
