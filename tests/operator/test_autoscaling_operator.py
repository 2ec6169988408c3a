"""The autopilot on the real test bed (a real operator process, a real apiserver with kwok, a
real broker; librdkafka's mock cluster where a broker must go away): a restarted operator
keeps a busy fleet until it has watched a whole window, a missing topic is named while the
others still scale, and a broker outage holds the replicas, then falls back."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from tests.conftest import K8s, TopicFactory
from tests.infra.mock_kafka import PARTITIONS, MockCluster
from tests.infra.records import ProduceReport
from tests.infra.waiting import wait_until
from tests.operator.conftest import (
    Operator,
    apply,
    condition,
    consumer_group,
    get,
    wait_condition,
)
from tests.operator.test_scaling_and_tuning import replicas


def commit_all(kafka: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Commit ``offsets`` for the group, as a worker that drained them would."""

    def committed() -> bool:
        client = Consumer({"bootstrap.servers": kafka, "group.id": group})
        try:
            tps = [TopicPartition(topic, p, o) for p, o in offsets.items()]
            client.commit(offsets=tps, asynchronous=False)
            return True
        except KafkaException:  # the coordinator may be loading: again
            return False
        finally:
            client.close()

    wait_until(committed, 30, "the commit", every=0.5)


def test_a_restarted_operator_keeps_a_busy_fleet_until_it_has_watched_a_whole_window(
    k8s: K8s,
    namespace: str,
    kafka: str,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    operator: Callable[..., Operator],
) -> None:
    """Defect 6: the first pass after a restart scaled the fleet down at once."""
    topic = topic_factory(partitions=3)
    for partition in range(3):
        produce(topic, 300, partition=partition)
    first = operator()
    manifest = consumer_group(
        "restarted",
        kafka,
        topic,
        autoscaling={"max_replicas": 3, "lag_per_replica": 100, "scale_down_stabilization_s": 40},
    )
    apply(k8s, namespace, manifest)
    wait_until(lambda: replicas(k8s, namespace, "restarted") == 3, 60, "3 replicas", every=0.5)

    commit_all(kafka, manifest["spec"]["group_id"], topic, {0: 300, 1: 300, 2: 300})
    first.stop()
    operator()  # a restart (a helm upgrade): the new process never saw the lag
    wait_until(
        lambda: get(k8s, namespace, "kcg", "restarted")["status"]["lag"] == 0,
        30,
        "the new operator to read lag 0",
        every=0.5,
    )
    for _ in range(20):  # 10 s of passes at 1 s: inside the window, nothing goes
        assert replicas(k8s, namespace, "restarted") == 3
        time.sleep(0.5)
    wait_until(lambda: replicas(k8s, namespace, "restarted") == 1, 60, "1 replica", every=0.5)


def test_a_missing_topic_is_named_and_the_group_scales_on_the_topics_that_exist(
    k8s: K8s,
    namespace: str,
    kafka: str,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    operator: Callable[..., Operator],
) -> None:
    """Defect 13: a deleted topic froze scaling for the others (TopicNotFound, then return)."""
    topic = topic_factory(partitions=3)
    produce(topic, 3_000)
    gone = f"{topic}-deleted"
    operator()
    manifest = consumer_group(
        "partial", kafka, topic, autoscaling={"max_replicas": 10, "lag_per_replica": 100}
    )
    manifest["spec"]["topics"] = [topic, gone]
    apply(k8s, namespace, manifest)

    wait_until(lambda: replicas(k8s, namespace, "partial") == 3, 60, "3 replicas", every=0.5)
    # The pass scales the Deployment before it patches the status: wait for the status too.
    degraded = wait_condition(k8s, namespace, "partial", "Degraded", "True", 30)
    assert degraded["reason"] == "TopicNotFound"
    assert gone in degraded["message"]
    active = condition(get(k8s, namespace, "kcg", "partial"), "Active")
    assert (active["status"], active["reason"]) == ("True", "LagOverActivation")


@pytest.fixture
def mock_cluster() -> Iterator[MockCluster]:
    cluster = MockCluster()
    yield cluster
    cluster.close()


def test_a_broker_outage_holds_the_replicas_then_falls_back(
    k8s: K8s,
    namespace: str,
    mock_cluster: MockCluster,
    operator: Callable[..., Operator],
) -> None:
    """Defect 12 and KEDA's fallback: while the lag cannot be read the fleet is held (never
    read as lag 0), Degraded says why, and after more failed reads than failure_threshold
    it runs fallback.replicas."""
    mock_cluster.produce("orders", 100 * PARTITIONS)
    operator()
    manifest = consumer_group(
        "outage",
        mock_cluster.bootstrap,
        "orders",
        autoscaling={
            "max_replicas": PARTITIONS,
            "lag_per_replica": 100,
            "scale_down_stabilization_s": 0,
            "fallback": {"failure_threshold": 2, "replicas": 2},
        },
    )
    apply(k8s, namespace, manifest)
    wait_until(lambda: replicas(k8s, namespace, "outage") == PARTITIONS, 60, "4", every=0.5)

    mock_cluster.close()  # the broker is gone

    def degraded() -> dict[str, str]:
        return condition(get(k8s, namespace, "kcg", "outage"), "Degraded")

    wait_until(lambda: degraded().get("reason") == "KafkaUnreachable", 60, "Degraded", every=0.5)
    assert "holding 4 replicas" in degraded()["message"]
    assert replicas(k8s, namespace, "outage") == PARTITIONS
    wait_until(lambda: replicas(k8s, namespace, "outage") == 2, 90, "the fallback", every=0.5)
    # the pass scales, then writes its status: on a busy machine a read may come between
    wait_until(
        lambda: "falling back to 2 replicas" in degraded()["message"],
        30,
        "Degraded saying so",
        every=0.5,
    )
    assert get(k8s, namespace, "kcg", "outage")["status"]["lastScaleReason"] == "Fallback"
