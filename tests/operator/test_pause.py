"""Pausing a ConsumerGroup, KEDA's way and Strimzi's (issue 21): ``kafleet.io/paused-replicas:
"N"`` holds the Deployment at N replicas and stops autoscaling, ``kafleet.io/pause-reconciliation:
"true"`` stops every apply (an edit, a deleted Deployment wait); each is a condition while the
annotation is there and is gone with it. kopf leaves annotations under its own storage prefix
(``kafleet.io/``) out of the diff that fires the update handler, so the operator watches
them itself: adding and removing each annotation is tested, on a group that exists already."""

from __future__ import annotations

import time
from collections.abc import Callable

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


def _replicas(k8s: K8s, namespace: str, name: str) -> tuple[int, int]:
    """The group's spec.replicas and its Deployment's."""
    group = get(k8s, namespace, "kcg", name)
    deployment = get(k8s, namespace, "deployment", name)
    return group["spec"]["replicas"], deployment["spec"]["replicas"]


def _annotate(k8s: K8s, namespace: str, name: str, annotation: str) -> None:
    k8s.kubectl("annotate", "--overwrite", "-n", namespace, "kcg", name, annotation)


def _gone(k8s: K8s, namespace: str, name: str, kind: str) -> bool:
    return not condition(get(k8s, namespace, "kcg", name), kind)


def test_paused_replicas_hold_the_deployment_and_stop_autoscaling_until_the_annotation_goes(
    k8s: K8s,
    namespace: str,
    kafka: str,
    topic_factory: TopicFactory,
    operator: Callable[..., Operator],
) -> None:
    topic = topic_factory(partitions=4)
    operator()
    held = consumer_group(
        "held", kafka, topic, replicas=1, autoscaling={"min_replicas": 2, "max_replicas": 2}
    )
    held["metadata"]["annotations"] = {"kafleet.io/paused-replicas": "1"}
    apply(k8s, namespace, held)

    paused = wait_condition(k8s, namespace, "held", "Paused", "True", timeout=60)
    wait_until(
        lambda: k8s.kubectl("get", "-n", namespace, "deployment", "held", check=False),
        30,
        "the Deployment",
        every=0.5,
    )
    time.sleep(4)  # passes that would scale to min_replicas 2 if autoscaling ran
    print(paused)
    assert paused["reason"] == "PausedReplicas"
    assert "1" in paused["message"]
    assert _replicas(k8s, namespace, "held") == (1, 1)

    k8s.kubectl("annotate", "-n", namespace, "kcg", "held", "kafleet.io/paused-replicas-")

    wait_until(
        lambda: _replicas(k8s, namespace, "held") == (2, 2),
        30,
        "autoscaling to resume: spec and Deployment at min_replicas 2",
        every=0.5,
    )
    wait_until(lambda: _gone(k8s, namespace, "held", "Paused"), 10, "Paused gone", every=0.5)

    _annotate(k8s, namespace, "held", "kafleet.io/paused-replicas=0")

    wait_until(
        lambda: _replicas(k8s, namespace, "held") == (2, 0),
        30,
        "the Deployment held at 0 while spec.replicas stays 2",
        every=0.5,
    )
    wait_condition(k8s, namespace, "held", "Paused", "True", timeout=10)


def test_unpausing_resumes_from_the_held_count_not_a_stale_spec_replicas(
    k8s: K8s,
    namespace: str,
    kafka: str,
    topic_factory: TopicFactory,
    operator: Callable[..., Operator],
) -> None:
    """Review of issue 21: held at 3 for a backfill with spec.replicas 1, removing the
    annotation went straight to 1. KEDA resumes from the current count, and the scale-down
    window starts when autoscaling does."""
    topic = topic_factory(partitions=4)
    operator()
    policy = {"min_replicas": 1, "max_replicas": 4, "scale_down_stabilization_s": 300}
    backfill = consumer_group("backfill", kafka, topic, replicas=1, autoscaling=policy)
    backfill["metadata"]["annotations"] = {"kafleet.io/paused-replicas": "3"}
    apply(k8s, namespace, backfill)
    wait_condition(k8s, namespace, "backfill", "Paused", "True", timeout=60)
    wait_until(
        lambda: k8s.kubectl("get", "-n", namespace, "deployment", "backfill", check=False),
        30,
        "the Deployment",
        every=0.5,
    )
    wait_until(lambda: _replicas(k8s, namespace, "backfill") == (1, 3), 30, "held", every=0.5)

    k8s.kubectl("annotate", "-n", namespace, "kcg", "backfill", "kafleet.io/paused-replicas-")

    wait_until(
        lambda: _replicas(k8s, namespace, "backfill") == (3, 3),
        30,
        "spec.replicas resumed from the held 3",
        every=0.5,
    )
    time.sleep(5)  # passes with no lag: the scale-down window has only begun
    assert _replicas(k8s, namespace, "backfill") == (3, 3)


def test_pause_reconciliation_stops_every_apply_until_the_annotation_goes(
    k8s: K8s,
    namespace: str,
    kafka: str,
    topic_factory: TopicFactory,
    operator: Callable[..., Operator],
) -> None:
    topic = topic_factory(partitions=2)
    operator()
    apply_ready(k8s, namespace, consumer_group("frozen", kafka, topic))
    old_image = get(k8s, namespace, "deployment", "frozen")["spec"]["template"]["spec"][
        "containers"
    ][0]["image"]

    _annotate(k8s, namespace, "frozen", "kafleet.io/pause-reconciliation=true")
    paused = wait_condition(k8s, namespace, "frozen", "ReconciliationPaused", "True", 30)
    apply(k8s, namespace, consumer_group("frozen", kafka, topic, image="registry.example.com/w:2"))
    k8s.kubectl("delete", "-n", namespace, "deployment", "frozen", "--wait=true")
    time.sleep(4)  # passes and events that would apply

    print(paused)
    assert not k8s.kubectl(
        "get", "-n", namespace, "deployment", "frozen", "--ignore-not-found", check=False
    ).strip()
    wait_until(
        lambda: (
            condition(get(k8s, namespace, "kcg", "frozen"), "Ready").get("reason")
            == "DeploymentMissing"
        ),
        10,
        "Ready reason=DeploymentMissing",
        every=0.5,
    )
    assert old_image != "registry.example.com/w:2"

    _annotate(k8s, namespace, "frozen", "kafleet.io/pause-reconciliation=false")

    wait_until(
        lambda: k8s.kubectl(
            "get", "-n", namespace, "deployment", "frozen", "--ignore-not-found", check=False
        ).strip(),
        10,
        "the Deployment applied again",
        every=0.5,
    )
    deployment = get(k8s, namespace, "deployment", "frozen")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == (
        "registry.example.com/w:2"
    )
    wait_until(
        lambda: _gone(k8s, namespace, "frozen", "ReconciliationPaused"),
        10,
        "ReconciliationPaused gone",
        every=0.5,
    )
    wait_condition(k8s, namespace, "frozen", "Ready", "True", timeout=30)
