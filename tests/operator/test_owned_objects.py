"""What a ConsumerGroup owns stays as its spec says (issue 21, defect 4 and two smaller items):
a deleted Deployment, ConfigMap or Service is put back within an interval, a hand edit of the
Deployment's image or replicas is reverted (``spec.replicas`` of the group is the one source),
a rollout that has not finished is ``Progressing`` and not ``Ready``, and an object of the same
name that the group does not own is left alone and reported ``Degraded`` naming it."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.conftest import K8s, TopicFactory
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


def _exists(k8s: K8s, namespace: str, kind: str, name: str) -> bool:
    out = k8s.kubectl("get", "-n", namespace, kind, name, "--ignore-not-found", check=False)
    return bool(out.strip())


def _uid(k8s: K8s, namespace: str, kind: str, name: str) -> str:
    return str(get(k8s, namespace, kind, name)["metadata"]["uid"])


def _worker(deployment: dict[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    return dict(next(c for c in containers if c["name"] == "worker"))


def test_a_deleted_deployment_configmap_or_service_is_put_back(
    k8s: K8s,
    namespace: str,
    kafka: str,
    topic_factory: TopicFactory,
    operator: Callable[..., Operator],
) -> None:
    topic = topic_factory(partitions=2)
    operator()  # observes every second
    apply_ready(k8s, namespace, consumer_group("kept", kafka, topic, replicas=2))

    for kind, name in (
        ("deployment", "kept"),
        ("configmap", "kept-worker"),
        ("service", "kept-metrics"),
    ):
        before = _uid(k8s, namespace, kind, name)
        k8s.kubectl("delete", "-n", namespace, kind, name, "--wait=true")

        wait_until(
            lambda kind=kind, name=name, before=before: (
                _exists(k8s, namespace, kind, name) and _uid(k8s, namespace, kind, name) != before
            ),
            5,
            f"the deleted {kind} {name} to be put back",
            every=0.2,
        )
    assert get(k8s, namespace, "deployment", "kept")["spec"]["replicas"] == 2
    wait_condition(k8s, namespace, "kept", "Ready", "True", timeout=30)


def test_a_hand_edit_of_the_deployments_image_or_replicas_is_reverted(
    k8s: K8s,
    namespace: str,
    kafka: str,
    topic_factory: TopicFactory,
    operator: Callable[..., Operator],
) -> None:
    topic = topic_factory(partitions=2)
    operator()
    apply_ready(k8s, namespace, consumer_group("edited", kafka, topic, replicas=2))
    image = _worker(get(k8s, namespace, "deployment", "edited"))["image"]

    k8s.kubectl(
        "set", "image", "-n", namespace, "deployment/edited", "worker=registry.example.com/evil:6"
    )
    wait_until(  # a pass or two; generous for a busy machine
        lambda: _worker(get(k8s, namespace, "deployment", "edited"))["image"] == image,
        20,
        f"the worker's image to be set back to {image}",
        every=0.2,
    )
    k8s.kubectl("scale", "-n", namespace, "deployment/edited", "--replicas=5")
    wait_until(
        lambda: get(k8s, namespace, "deployment", "edited")["spec"]["replicas"] == 2,
        20,
        "the Deployment's replicas to be set back to the group's spec.replicas (2)",
        every=0.2,
    )


def test_a_rollout_that_has_not_finished_is_progressing_and_not_ready(
    k8s: K8s,
    namespace: str,
    kafka: str,
    topic_factory: TopicFactory,
    operator: Callable[..., Operator],
) -> None:
    topic = topic_factory(partitions=2)
    operator()
    apply_ready(k8s, namespace, consumer_group("rolling", kafka, topic, replicas=2))

    # A new template whose pods no node takes: the surge pod stays Pending, the old pods serve.
    stuck = consumer_group(
        "rolling", kafka, topic, replicas=2, pod_template={"nodeSelector": {"nowhere": "true"}}
    )
    apply(k8s, namespace, stuck)

    progressing = wait_condition(k8s, namespace, "rolling", "Progressing", "True", timeout=30)
    # RollingOut first says the Deployment's controller has not observed the new generation;
    # once it has, the message counts the updated replicas (CI read between the two).
    wait_until(
        lambda: (
            "updated"
            in condition(get(k8s, namespace, "kcg", "rolling"), "Progressing").get("message", "")
        ),
        30,
        "Progressing: the updated replicas counted",
        every=0.5,
    )
    group = get(k8s, namespace, "kcg", "rolling")
    ready, progressing = condition(group, "Ready"), condition(group, "Progressing")
    print(json.dumps([ready, progressing], indent=1))
    assert ready["status"] == "False"
    assert ready["reason"] == "RollingOut"
    assert progressing["reason"] == "RollingOut"
    assert "updated" in progressing["message"]

    apply_ready(k8s, namespace, consumer_group("rolling", kafka, topic, replicas=2))


def test_an_object_of_the_same_name_the_group_does_not_own_is_left_alone_and_reported(
    k8s: K8s,
    namespace: str,
    kafka: str,
    topic_factory: TopicFactory,
    operator: Callable[..., Operator],
) -> None:
    topic = topic_factory(partitions=2)
    k8s.kubectl(
        "create", "configmap", "-n", namespace, "theirs-worker", "--from-literal=owner=someone"
    )
    k8s.kubectl(
        "create", "deployment", "-n", namespace, "mine", "--image=registry.example.com/other:1"
    )
    operator()
    apply(k8s, namespace, consumer_group("theirs", kafka, topic))
    apply(k8s, namespace, consumer_group("mine", kafka, topic))

    for group, kind, name in (
        ("theirs", "ConfigMap", "theirs-worker"),
        ("mine", "Deployment", "mine"),
    ):
        degraded = wait_condition(k8s, namespace, group, "Degraded", "True", timeout=30)
        wait_until(
            lambda group=group: (
                condition(get(k8s, namespace, "kcg", group), "Degraded").get("reason") == "NotOwned"
            ),
            30,
            f"{group}: Degraded reason=NotOwned",
            every=0.5,
        )
        degraded = condition(get(k8s, namespace, "kcg", group), "Degraded")
        print(degraded)
        assert f"{kind} {name}" in degraded["message"]
        assert condition(get(k8s, namespace, "kcg", group), "Ready")["status"] == "False"
        obj = get(k8s, namespace, kind.lower(), name)
        assert not obj["metadata"].get("ownerReferences")
        managers = {m["manager"] for m in obj["metadata"].get("managedFields", [])}
        assert "kafleet-operator" not in managers
    assert get(k8s, namespace, "configmap", "theirs-worker")["data"] == {"owner": "someone"}
    assert _worker_or_first(get(k8s, namespace, "deployment", "mine"))["image"] == (
        "registry.example.com/other:1"
    )

    # Once theirs is gone, the name is free: the group takes it with its own object.
    k8s.kubectl("delete", "-n", namespace, "configmap", "theirs-worker")
    ready = wait_condition(k8s, namespace, "theirs", "Ready", "True", timeout=60)
    assert ready["status"] == "True"
    k8s.kubectl("delete", "-n", namespace, "kcg", "mine", "--wait=true")
    assert _exists(k8s, namespace, "deployment", "mine")  # not collected with the group


def _worker_or_first(deployment: dict[str, Any]) -> dict[str, Any]:
    return dict(deployment["spec"]["template"]["spec"]["containers"][0])


def test_a_metrics_service_an_older_operator_made_with_a_cluster_ip_becomes_headless(
    k8s: K8s,
    namespace: str,
    kafka: str,
    topic_factory: TopicFactory,
    operator: Callable[..., Operator],
) -> None:
    """Issue 22: a cluster IP per group filled the Service range at a few hundred groups. A
    cluster IP cannot be taken away from a Service, so the old one is made again, headless."""
    manifest = consumer_group("older", kafka, topic_factory(partitions=1))
    apply(k8s, namespace, manifest)  # no operator yet: what an older one left behind follows
    group = get(k8s, namespace, "kcg", "older")
    owner = {
        "apiVersion": "kafleet.io/v1alpha1",
        "kind": "ConsumerGroup",
        "name": "older",
        "uid": group["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    old = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "older-metrics",
            "labels": {"app.kubernetes.io/managed-by": "kafleet-operator"},
            "ownerReferences": [owner],
        },
        "spec": {"selector": {"app.kubernetes.io/instance": "older"}, "ports": [{"port": 8080}]},
    }
    apply(k8s, namespace, old)
    assert get(k8s, namespace, "service", "older-metrics")["spec"]["clusterIP"] != "None"

    operator()
    wait_condition(k8s, namespace, "older", "Ready", "True", 90)

    service = get(k8s, namespace, "service", "older-metrics")
    assert service["spec"]["clusterIP"] == "None"
    assert service["metadata"]["ownerReferences"][0]["uid"] == owner["uid"]
