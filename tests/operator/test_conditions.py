"""A ConsumerGroup's conditions, judged without a cluster: every state gets Ready, Progressing
and Degraded with a reason and a message (an absent Deployment, a deleted one, a rollout in
progress, a refused apply and an object the group does not own included), a pause is a
condition only while its annotation is there, and a condition keeps its transition time while
its status stays."""

from __future__ import annotations

from kafleet_operator.policy.conditions import Facts, condition, judge, merged, rollout
from kafleet_operator.policy.pause import Pause, read


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


def test_a_deployment_gone_after_its_apply_is_missing_and_not_ready() -> None:
    conditions = by_type(Facts(2, applied=2, replicas=None))

    assert conditions["Ready"]["status"] == "False"
    assert conditions["Ready"]["reason"] == "DeploymentMissing"


def test_a_rollout_in_progress_is_progressing_and_not_ready_though_old_pods_are_ready() -> None:
    # 2 replicas, the old template's 2 ready, 1 new pod surging (not ready yet).
    rolling = rollout(5, 5, replicas=2, current=3, updated=1, available=2)

    conditions = by_type(Facts(3, applied=3, replicas=2, ready=2, rolling=rolling))

    assert rolling == "1 of 2 replicas updated to the new template"
    assert conditions["Progressing"]["status"] == "True"
    assert conditions["Progressing"]["reason"] == "RollingOut"
    assert conditions["Ready"]["status"] == "False"
    assert conditions["Ready"]["reason"] == "RollingOut"


def test_a_rollout_is_done_when_every_replica_is_new_and_available_and_no_old_one_is_left() -> None:
    assert rollout(5, 4, 2, 2, 2, 2) == (
        "the Deployment's generation 5 is not yet observed by its controller"
    )
    assert rollout(5, 5, 2, 3, 2, 2) == "1 old replicas still terminating"
    assert rollout(5, 5, 2, 2, 2, 1) == "1 of 2 updated replicas available"
    assert rollout(5, 5, 2, 2, 2, 2) is None
    assert rollout(5, 5, 0, 0, 0, 0) is None


def test_an_object_the_group_does_not_own_is_degraded_naming_it() -> None:
    message = "ConfigMap billing-worker exists, with no controller, not by ConsumerGroup billing"

    conditions = by_type(Facts(1, apply_failure=message, refusal="NotOwned"))

    assert conditions["Degraded"]["reason"] == "NotOwned"
    assert conditions["Degraded"]["message"] == message
    assert conditions["Progressing"]["status"] == "False"
    assert conditions["Ready"]["status"] == "False"


def test_the_pause_annotations_are_read_and_a_bad_value_pauses_nothing() -> None:
    assert read({"annotations": {"kafleet.io/paused-replicas": "3"}}) == Pause(replicas=3)
    assert read({"annotations": {"kafleet.io/pause-reconciliation": "True"}}).reconciliation
    assert read({"annotations": {"kafleet.io/pause-reconciliation": "false"}}) == Pause()
    assert read({}) == Pause()
    bad = read({"annotations": {"kafleet.io/paused-replicas": "two"}})
    assert bad.replicas is None
    assert bad.problem is not None
    assert "'two'" in bad.problem


def test_a_pause_is_a_condition_while_its_annotation_is_there_and_is_removed_with_it() -> None:
    held = Pause(replicas=0, reconciliation=True)
    paused = judge(Facts(1, applied=1, replicas=0, paused=held))
    by = {c["type"]: c for c in paused}

    assert by["Paused"]["status"] == "True"
    assert by["Paused"]["reason"] == "PausedReplicas"
    assert "held at 0 replicas" in by["Paused"]["message"]
    assert by["ReconciliationPaused"]["status"] == "True"
    resumed = merged(paused, judge(Facts(1, applied=1, replicas=0)))
    assert {c["type"] for c in resumed} == {"Ready", "Progressing", "Degraded"}


def test_a_pause_survives_an_invalid_spec_and_other_conditions_are_kept() -> None:
    active = condition("Active", True, "LagOverActivation", "lag 9", 1)
    before = merged([], [active, *judge(Facts(1, applied=1, replicas=1, paused=Pause(2)))])

    after = merged(before, judge(Facts(2, invalid="handler: bad", paused=Pause(2))))

    assert {c["type"] for c in after} >= {"Active", "Paused"}


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


def test_active_is_removed_once_nothing_judges_it() -> None:
    """Review of issue 21: once autoscaling was removed or paused, the last Active verdict
    stayed for ever."""
    before = [condition("Active", True, "LagOverActivation", "lag 9", 1)]

    kept = merged(before, [])
    dropped = merged(before, [], gone=("Active",))

    assert [c["type"] for c in kept] == ["Active"]
    assert dropped == []
