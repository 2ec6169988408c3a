"""A real operator process on the real control plane (kwok runs the pods) and the real broker:
a ConsumerGroup becomes its Deployment, ConfigMap and Service, turns Ready, shows its columns,
scales through the scale subresource, refuses or reports bad specs by field (a refused apply
too, with the API server's message), leaves a right fleet alone after a restart, takes what it
owned with it when deleted, and carries no finalizer: it goes at once with no operator."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from kafleet.errors import ConfigError
from kafleet_operator.policy.spec import parse_spec
from tests.conftest import REPO, K8s, TopicFactory
from tests.infra.kafka import TestbedError
from tests.infra.waiting import wait_until
from tests.operator.conftest import (
    Operator,
    apply,
    apply_ready,
    condition,
    consumer_group,
    get,
    wait_condition,
)


def owned(k8s: K8s, namespace: str, name: str) -> dict[str, dict[str, Any]]:
    return {
        kind: get(k8s, namespace, kind, obj)
        for kind, obj in (
            ("deployment", name),
            ("configmap", f"{name}-worker"),
            ("service", f"{name}-metrics"),
        )
    }


def versions(objects: dict[str, dict[str, Any]]) -> dict[str, object]:
    """What only a write of the spec changes: the Deployment's generation (its status moves
    with the pods), the others' resource versions."""
    return {
        kind: obj["metadata"]["generation" if kind == "deployment" else "resourceVersion"]
        for kind, obj in objects.items()
    }


def test_a_consumer_group_becomes_its_objects_and_turns_ready(
    k8s: K8s,
    namespace: str,
    kafka: str,
    topic_factory: TopicFactory,
    operator: Callable[..., Operator],
) -> None:
    topic = topic_factory(partitions=4)
    operator()
    apply(k8s, namespace, consumer_group("billing", kafka, topic, replicas=2))

    wait_until(
        lambda: k8s.kubectl("get", "-n", namespace, "deployment", "billing", check=False),
        60,
        "the Deployment",
        every=0.5,
    )
    ready = wait_condition(k8s, namespace, "billing", "Ready", "True", timeout=90)
    wait_until(
        lambda: get(k8s, namespace, "kcg", "billing")["status"].get("partitions") == 4,
        30,
        "the partition count read from Kafka",
        every=0.5,
    )
    group = get(k8s, namespace, "kcg", "billing")
    objects = owned(k8s, namespace, "billing")

    for obj in objects.values():
        (ref,) = obj["metadata"]["ownerReferences"]
        assert ref["kind"] == "ConsumerGroup"
        assert ref["uid"] == group["metadata"]["uid"]
        assert ref["controller"] is True
    deployment = objects["deployment"]
    assert deployment["spec"]["replicas"] == 2
    assert "2 of 2 replicas ready" in ready["message"]
    assert group["status"]["labelSelector"] == (
        "app.kubernetes.io/instance=billing,app.kubernetes.io/name=kafleet-worker"
    )
    assert group["status"]["partitions"] == 4
    table = k8s.kubectl("get", "-n", namespace, "kcg", "-o", "wide")
    print(table)
    header = table.splitlines()[0].split()
    assert header[:9] == [
        "NAME", "READY", "REPLICAS", "MIN", "MAX", "ACTIVE", "LAG", "MAXPOLLRECORDS", "AGE"
    ]  # fmt: skip
    assert header[9:] == ["PARTITIONS", "TIMELAG", "REASON", "PAUSED"]
    assert table.splitlines()[1].split()[1:3] == ["True", "2"]


def test_kubectl_scale_works_through_the_scale_subresource(
    k8s: K8s,
    namespace: str,
    kafka: str,
    topic_factory: TopicFactory,
    operator: Callable[..., Operator],
) -> None:
    topic = topic_factory(partitions=4)
    operator()
    apply_ready(k8s, namespace, consumer_group("scaled", kafka, topic, replicas=1))

    k8s.kubectl("scale", "-n", namespace, "kcg", "scaled", "--replicas=3")

    wait_until(
        lambda: get(k8s, namespace, "deployment", "scaled")["spec"]["replicas"] == 3,
        60,
        "the Deployment at 3 replicas",
        every=0.5,
    )
    wait_until(
        lambda: get(k8s, namespace, "kcg", "scaled").get("status", {}).get("readyReplicas") == 3,
        90,
        "3 ready replicas in the status",
        every=0.5,
    )


MALFORMED = [
    ({"topics": []}, "give exactly one of topics and topic_pattern"),
    ({"autoscaling": {"min_replicas": 5, "max_replicas": 2}}, "must not exceed"),
    ({"autoscaling": {"lag_per_replica": -5}}, "lag_per_replica"),
    ({"ordering": "random"}, "ordering"),
    ({"security": {"protocol": "SASL_SSL", "sasl_password": "hunter2"}}, "sasl_password"),
    ({"max_poll_records": 0}, "max_poll_records"),
    ({"replicas": -1}, "replicas"),
    ({"queue": {"max_records": 100}, "max_poll_records": 500}, "max_poll_records"),
]
DEGRADED = [
    ({"spark": {"table": "/t", "batch": {"max_records": 9000}}}, "spark.batch.max_records"),
    ({"drain_timeout_s": 200}, "drain_timeout_s"),
]


@pytest.mark.parametrize(("change", "named"), MALFORMED)
def test_a_malformed_manifest_is_rejected_by_the_api_server_naming_the_field(
    k8s: K8s, namespace: str, crd: str, change: dict[str, object], named: str
) -> None:
    manifest = consumer_group("bad", "kafka:9092", "orders", **change)

    with pytest.raises(TestbedError, match=named):
        apply(k8s, namespace, manifest)


@pytest.mark.parametrize(("change", "named"), DEGRADED)
def test_a_spec_only_the_operator_can_judge_is_reported_degraded_naming_the_field(
    k8s: K8s,
    namespace: str,
    kafka: str,
    operator: Callable[..., Operator],
    change: dict[str, object],
    named: str,
) -> None:
    running = operator()
    apply(k8s, namespace, consumer_group("judged", kafka, "orders", **change))

    degraded = wait_condition(k8s, namespace, "judged", "Degraded", "True")

    assert degraded["reason"] == "InvalidSpec"
    assert named in degraded["message"]
    assert not k8s.kubectl("get", "-n", namespace, "deployment", "judged", check=False)
    labels = {"namespace": namespace, "consumergroup": "judged"}
    assert running.metric("kafleet_operator_reconciles_total", **labels, result="invalid") == 1


def test_a_missing_topic_and_an_unreachable_broker_are_reported_degraded(
    k8s: K8s, namespace: str, kafka: str, operator: Callable[..., Operator]
) -> None:
    operator()
    apply(k8s, namespace, consumer_group("lost", kafka, "no-such-topic"))
    apply(k8s, namespace, consumer_group("far", "127.0.0.1:1", "orders"))

    missing = wait_condition(k8s, namespace, "lost", "Degraded", "True")
    unreachable = wait_condition(k8s, namespace, "far", "Degraded", "True", timeout=90)

    assert missing["reason"] == "TopicNotFound"
    assert "no-such-topic" in missing["message"]
    assert unreachable["reason"] == "KafkaUnreachable"
    assert "127.0.0.1:1" in unreachable["message"]


def test_a_restarted_operator_changes_nothing_that_is_already_right(
    k8s: K8s,
    namespace: str,
    kafka: str,
    topic_factory: TopicFactory,
    operator: Callable[..., Operator],
) -> None:
    topic = topic_factory(partitions=2)
    first = operator()
    apply_ready(k8s, namespace, consumer_group("steady", kafka, topic, replicas=2))
    before = versions(owned(k8s, namespace, "steady"))
    pods_before = k8s.kubectl("get", "pods", "-n", namespace, "-o", "name")

    first.stop()
    operator()
    time.sleep(8)  # the resume handler and several timer passes

    after = versions(owned(k8s, namespace, "steady"))
    assert after == before
    assert k8s.kubectl("get", "pods", "-n", namespace, "-o", "name") == pods_before


def test_deleting_the_consumer_group_removes_what_it_owned(
    k8s: K8s,
    namespace: str,
    kafka: str,
    topic_factory: TopicFactory,
    operator: Callable[..., Operator],
) -> None:
    topic = topic_factory(partitions=2)
    operator()
    apply_ready(k8s, namespace, consumer_group("gone", kafka, topic))

    k8s.kubectl("delete", "-n", namespace, "kcg", "gone", "--wait=true", "--timeout=60s")

    for kind, name in (
        ("deployment", "gone"),
        ("configmap", "gone-worker"),
        ("service", "gone-metrics"),
    ):
        wait_until(
            lambda kind=kind, name=name: (
                not k8s.kubectl(
                    "get", "-n", namespace, kind, name, "--ignore-not-found", check=False
                ).strip()
            ),
            60,
            f"the {kind} to be collected",
            every=0.5,
        )


def test_the_example_manifest_is_accepted_by_the_api_server(
    k8s: K8s, namespace: str, crd: str
) -> None:
    example = REPO / "examples" / "consumergroup.yaml"

    out = k8s.kubectl("apply", "-n", namespace, "--dry-run=server", "-f", str(example))

    assert "consumergroup.kafleet.io/billing created (server dry run)" in out


@pytest.mark.parametrize(
    "name",
    [
        "b" * 56,  # its Service, b...b-metrics, would pass the 63 of a DNS-1035 label
        "billing.eu",  # a dot: a valid object name, not a Service name
        "2billing",  # a DNS-1035 label starts with a letter
    ],
)
def test_a_name_its_service_or_pod_labels_cannot_carry_is_refused_naming_metadata_name(
    k8s: K8s, namespace: str, kafka: str, crd: str, name: str
) -> None:
    manifest = consumer_group(name, kafka, "orders")

    with pytest.raises(TestbedError, match=r"metadata\.name: at most 55 characters"):
        apply(k8s, namespace, manifest)


@pytest.mark.parametrize("replicas", [0, 4])
def test_a_fallback_outside_the_replica_bounds_is_refused_naming_it(
    k8s: K8s, namespace: str, kafka: str, crd: str, replicas: int
) -> None:
    bounds = {"min_replicas": 1, "max_replicas": 3, "fallback": {"replicas": replicas}}
    manifest = consumer_group("fallback", kafka, "orders", autoscaling=bounds)

    with pytest.raises(TestbedError, match=r"autoscaling\.fallback\.replicas must lie within"):
        apply(k8s, namespace, manifest)
    with pytest.raises(ConfigError, match=r"fallback\.replicas must lie within"):
        parse_spec(manifest["spec"])


def test_a_name_of_55_characters_is_accepted(
    k8s: K8s, namespace: str, kafka: str, crd: str
) -> None:
    manifest = consumer_group("b" * 55, kafka, "orders")

    out = k8s.kubectl(
        "apply", "-n", namespace, "--dry-run=server", "-f", "-", input=yaml.safe_dump(manifest)
    )

    assert "created (server dry run)" in out


def wait_reason(k8s: K8s, namespace: str, name: str, reason: str) -> dict[str, Any]:
    """The Degraded condition once its reason is ``reason`` (a transient lag error may come
    first: a fresh group's coordinator is not known at once)."""
    wait_until(
        lambda: condition(get(k8s, namespace, "kcg", name), "Degraded").get("reason") == reason,
        60,
        f"{name}: Degraded for {reason}",
        every=0.5,
    )
    return condition(get(k8s, namespace, "kcg", name), "Degraded")


# Issue 11: four malformed groups that were accepted and never reported, each with its fix.
ISSUE_11 = [
    ({"guarantee": "exactly-once"}, {"spark": {"table": "/lake/bills"}}, "spark"),
    (
        {"guarantee": "exactly-once", "spark": {"job": "jobs:write"}},
        {"spark": {"job": "jobs:write", "table": "/lake/bills"}},
        "spark.table",
    ),
    ({"handler": "bill"}, {"handler": "orders:bill"}, "handler"),
    ({"resources": {"limits": {"cpu": "lots"}}}, {"resources": {"limits": {"cpu": "2"}}}, "cpu"),
]


@pytest.mark.parametrize(("bad", "fix", "named"), ISSUE_11)
def test_a_malformed_group_is_refused_or_reported_naming_the_field_and_an_edit_makes_it_ready(
    k8s: K8s,
    namespace: str,
    kafka: str,
    topic_factory: TopicFactory,
    operator: Callable[..., Operator],
    bad: dict[str, object],
    fix: dict[str, object],
    named: str,
) -> None:
    topic = topic_factory(partitions=2)
    operator()
    manifest = consumer_group("malformed", kafka, topic, **bad)

    refusal = ""
    try:
        apply(k8s, namespace, manifest)
    except TestbedError as exc:
        refusal = str(exc)
    if refusal:  # by the API server, from the CRD's schema
        print(refusal)
        assert named in refusal
    else:  # by the operator, from the model
        degraded = wait_reason(k8s, namespace, "malformed", "InvalidSpec")
        print(degraded)
        assert named in degraded["message"]

    ready = apply_ready(k8s, namespace, {**manifest, "spec": {**manifest["spec"], **fix}})
    assert ready["status"] == "True"


def test_a_refused_apply_is_reported_degraded_with_the_api_servers_message_until_an_edit(
    k8s: K8s,
    namespace: str,
    kafka: str,
    topic_factory: TopicFactory,
    operator: Callable[..., Operator],
) -> None:
    topic = topic_factory(partitions=2)
    running = operator()
    # The model cannot judge what pod_template merges into the pod: the API server can.
    bad = consumer_group("refused", kafka, topic, pod_template={"serviceAccountName": "Not_A_Name"})
    apply(k8s, namespace, bad)

    degraded = wait_reason(k8s, namespace, "refused", "ApplyFailed")
    group = get(k8s, namespace, "kcg", "refused")
    print(degraded)

    assert degraded["status"] == "True"
    assert "serviceAccountName" in degraded["message"]
    assert "Not_A_Name" in degraded["message"]
    assert condition(group, "Ready")["status"] == "False"
    assert condition(group, "Progressing")["status"] == "False"
    apply_ready(k8s, namespace, consumer_group("refused", kafka, topic))
    fixed = get(k8s, namespace, "kcg", "refused")
    assert condition(fixed, "Degraded")["status"] == "False"
    assert not fixed["status"].get("applyFailure")
    labels = {"namespace": namespace, "consumergroup": "refused"}
    assert running.metric("kafleet_operator_reconciles_total", **labels, result="refused") == 1
    assert running.metric("kafleet_operator_reconciles_total", **labels, result="applied") == 1


def test_a_consumer_group_is_deleted_at_once_with_no_operator_running(
    k8s: K8s,
    namespace: str,
    kafka: str,
    topic_factory: TopicFactory,
    operator: Callable[..., Operator],
) -> None:
    topic = topic_factory(partitions=2)
    running = operator()
    apply_ready(k8s, namespace, consumer_group("orphaned", kafka, topic))
    time.sleep(3)  # several passes of the operator over the group
    running.stop()

    assert not get(k8s, namespace, "kcg", "orphaned")["metadata"].get("finalizers")
    k8s.kubectl("delete", "-n", namespace, "kcg", "orphaned", "--timeout=20s")
    assert not k8s.kubectl(
        "get", "-n", namespace, "kcg", "orphaned", "--ignore-not-found", check=False
    ).strip()


def test_the_finalizer_an_older_operator_put_is_taken_off(
    k8s: K8s,
    namespace: str,
    kafka: str,
    topic_factory: TopicFactory,
    operator: Callable[..., Operator],
) -> None:
    topic = topic_factory(partitions=2)
    apply(k8s, namespace, consumer_group("marked", kafka, topic))
    k8s.kubectl(
        "patch", "-n", namespace, "kcg", "marked", "--type=merge",
        "-p", '{"metadata": {"finalizers": ["kafleet.io/finalizer"]}}',
    )  # fmt: skip

    operator()

    wait_until(
        lambda: not get(k8s, namespace, "kcg", "marked")["metadata"].get("finalizers"),
        60,
        "the old finalizer to be taken off",
        every=0.5,
    )
