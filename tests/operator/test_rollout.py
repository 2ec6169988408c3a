"""An edit of the worker's configuration reaches every pod (issue 21, defect 3): a pod-template
annotation carries a hash of the worker's file without its live-tunable fields, so an edit of
``handler`` (or ``topics``, ``group_id``, ``security``, ...) rolls the Deployment and every pod
is replaced, while a change of ``max_poll_records`` or ``concurrency`` only rewrites the
ConfigMap, which running workers apply live: no pod is replaced, no rebalance."""

from __future__ import annotations

from collections.abc import Callable

from tests.conftest import K8s, TopicFactory
from tests.infra.waiting import wait_until
from tests.operator.conftest import Operator, apply, apply_ready, consumer_group, get


def _pods(k8s: K8s, namespace: str) -> set[str]:
    out = k8s.kubectl(
        "get", "pods", "-n", namespace, "-l", "app.kubernetes.io/instance=billing", "-o", "name"
    )
    return set(out.split())


def test_a_handler_edit_replaces_every_pod_and_a_tuning_change_replaces_none(
    k8s: K8s,
    namespace: str,
    kafka: str,
    topic_factory: TopicFactory,
    operator: Callable[..., Operator],
) -> None:
    topic = topic_factory(partitions=2)
    operator()
    apply_ready(k8s, namespace, consumer_group("billing", kafka, topic, replicas=2))
    wait_until(lambda: len(_pods(k8s, namespace)) == 2, 60, "two pods", every=0.5)
    first = _pods(k8s, namespace)

    apply(
        k8s, namespace, consumer_group("billing", kafka, topic, replicas=2, handler="orders:refund")
    )

    wait_until(
        lambda: (now := _pods(k8s, namespace)) and not (now & first) and len(now) == 2,
        120,
        "every pod replaced after the handler's edit",
        every=0.5,
    )
    second = _pods(k8s, namespace)
    generation = get(k8s, namespace, "deployment", "billing")["metadata"]["generation"]

    apply(
        k8s,
        namespace,
        consumer_group(
            "billing", kafka, topic, replicas=2, handler="orders:refund", max_poll_records=77
        ),
    )

    wait_until(
        lambda: (
            "max_poll_records: 77"
            in get(k8s, namespace, "configmap", "billing-worker")["data"]["worker.yaml"]
        ),
        60,
        "the ConfigMap to carry the new max_poll_records",
        every=0.5,
    )
    assert get(k8s, namespace, "deployment", "billing")["metadata"]["generation"] == generation
    assert _pods(k8s, namespace) == second
