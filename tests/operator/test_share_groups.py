"""Share groups (``group_type: share``) on the real test bed: a real broker with share groups on,
a real kube-apiserver with kwok, real operator processes.

A share group's lag is read from Kafka, as a consumer group's is (so it is right at zero
replicas), through Kafka's Java admin in the cluster's reading process (never a JVM in the
operator's own): a group that never had a member counts its backlog from the log start, one
whose members acknowledged records counts what the broker counts (KIP-1226). The operator scales
a share group past its partition count, up to max_replicas; without a share client it holds
the replicas and says what to set; the API server refuses what a share group cannot run with."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import KafkaException

from kafleet.config.security import Security
from kafleet.config.share import BYTES, CLASSPATH_ENV
from kafleet.share import jvm
from kafleet.share.client import Ack, ShareAdmin, ShareClient
from kafleet_operator.reading import lag_reader, readers, snapshots
from tests.conftest import REPO, K8s, TopicFactory
from tests.infra.kafka import TestbedError
from tests.infra.records import ProduceReport
from tests.infra.waiting import wait_until
from tests.operator.conftest import Operator, apply, condition, consumer_group, get
from tests.operator.test_autoscaling_operator import commit_all
from tests.operator.test_scaling_and_tuning import replicas

IMAGE = "registry.example.com/kafleet-spark:1"  # an image with Java (not pulled: kwok's pods)


def read(kafka: str, *wants: snapshots.Want) -> snapshots.Snapshot:
    """One read of the cluster by a reading process of its own, as the operator reads."""
    child = readers.Reader(snapshots.Target(kafka, Security(), wants[0]))
    try:
        found = child.read(list(wants))
    finally:
        child.close()
    assert isinstance(found, snapshots.Snapshot), found
    return found


def acknowledge(kafka: str, group: str, topic: str, classpath: str, at_least: int) -> int:
    """A share consumer in this process takes records of ``topic`` and accepts each, until at
    least ``at_least`` are; it leaves the group with nothing in flight. The count accepted."""
    jvm.start(classpath, ["-Xmx128m"])
    admin = ShareAdmin({"bootstrap.servers": kafka})
    try:
        admin.set_group_configs(group, {"share.auto.offset.reset": "earliest"}, 30)
    finally:
        admin.close()
    properties = {
        "bootstrap.servers": kafka,
        "group.id": group,
        "share.acknowledgement.mode": "explicit",
        "share.acquire.mode": "record_limit",
        "max.poll.records": "5",
        "key.deserializer": BYTES,
        "value.deserializer": BYTES,
    }
    client = ShareClient(properties, [topic])
    accepted = 0
    deadline = time.monotonic() + 60
    try:
        while accepted < at_least and time.monotonic() < deadline:
            for record in client.poll(1.0):
                client.acknowledge(record, Ack.ACCEPT)
                accepted += 1
            client.commit(10)
    finally:
        client.close(10)
    assert accepted >= at_least, f"only {accepted} records in 60 s"
    return accepted


def test_a_share_groups_lag_is_read_in_the_reading_process_as_kafka_counts_it(
    kafka: str,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    group_id: Callable[[], str],
    share_classpath: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before any member: the backlog from the log start (auto_offset_reset earliest, as the
    workers set the group). After a member accepted some: the records neither acknowledged
    nor archived. A consumer group read in the same pass is read as ever."""
    monkeypatch.setenv(CLASSPATH_ENV, share_classpath)
    topic, group, plain = topic_factory(partitions=2), group_id(), group_id()
    produce(topic, 60, partition=0)
    produce(topic, 40, partition=1)
    commit_all(kafka, plain, topic, {0: 50, 1: 40})
    share = snapshots.Want(group, (topic,), share=True)
    consumer = snapshots.Want(plain, (topic,))

    before = read(kafka, share, consumer)

    fresh = lag_reader.lag_of(before, share)
    assert fresh.lag == {(topic, 0): 60, (topic, 1): 40}
    assert fresh.committed == {(topic, 0): None, (topic, 1): None}
    assert lag_reader.lag_of(before, consumer).total == 10

    accepted = acknowledge(kafka, group, topic, share_classpath, at_least=10)

    def total() -> int:
        return lag_reader.lag_of(read(kafka, share, consumer), share).total

    wait_until(lambda: total() == 100 - accepted, 30, f"share lag {100 - accepted}", every=0.5)
    after = read(kafka, share, consumer)
    states = after.share[group]
    assert isinstance(states, dict)
    started = [tp for tp, state in states.items() if state.lag is not None]
    assert started, states  # the broker's own count, where the member took records
    reading = lag_reader.lag_of(after, share)
    for tp in started:
        assert reading.lag[tp] == states[tp].lag
    assert lag_reader.lag_of(after, consumer).total == 10


def test_without_a_share_client_a_share_groups_lag_is_unknown_naming_what_to_set(
    kafka: str,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    group_id: Callable[[], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(CLASSPATH_ENV, raising=False)
    topic = topic_factory(partitions=1)
    produce(topic, 10)
    share = snapshots.Want(group_id(), (topic,), share=True)
    consumer = snapshots.Want(group_id(), (topic,))

    found = read(kafka, share, consumer)

    with pytest.raises(KafkaException) as caught:
        lag_reader.lag_of(found, share)
    assert lag_reader.is_share_client_missing(caught.value)
    assert CLASSPATH_ENV in lag_reader.describe(caught.value)
    assert lag_reader.lag_of(found, consumer).total == 10  # the others are read


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _runs_a_jvm(pid: int) -> bool:
    try:
        return "libjvm" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def test_the_operator_scales_a_share_group_above_the_partition_count_from_its_lag(
    k8s: K8s,
    namespace: str,
    kafka: str,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    operator: Callable[..., Operator],
    share_classpath: str,
) -> None:
    """One partition, a backlog of 4,000 that no member has touched (the lag is right at any
    replica count: read from Kafka), 100 records a replica: 4 replicas, max_replicas, where a
    consumer group stops at 1. The JVM runs in the cluster's reading process only."""
    topic = topic_factory(partitions=1)
    produce(topic, 4_000)
    running = operator(args=["--share-classpath", share_classpath], env={CLASSPATH_ENV: None})
    manifest = consumer_group(
        "shared",
        kafka,
        topic,
        image=IMAGE,
        group_type="share",
        autoscaling={"max_replicas": 4, "lag_per_replica": 100},
    )
    apply(k8s, namespace, manifest)

    wait_until(lambda: replicas(k8s, namespace, "shared") == 4, 60, "4 replicas", every=0.5)
    wait_until(
        lambda: get(k8s, namespace, "kcg", "shared")["status"].get("lag") == 4_000,
        30,
        "the status's lag",
        every=0.5,
    )
    group = get(k8s, namespace, "kcg", "shared")
    status = group["status"]
    assert (status["partitions"], status["maxPartitionLag"]) == (1, 4_000)
    assert status["lastScaleReason"] == "ScaledUpForLag"
    assert group["spec"]["replicas"] == 4
    assert condition(group, "Degraded")["reason"] == "Observed"
    assert condition(group, "Active")["status"] == "True"
    columns = k8s.kubectl("get", "-n", namespace, "kcg", "shared", "--no-headers")
    assert "4000" in columns.split()  # the Lag column
    assert running.proc is not None
    assert not _runs_a_jvm(running.proc.pid)
    jvms = [child for child in _children(running.proc.pid) if _runs_a_jvm(child)]
    assert jvms

    # A reading process ends on SIGTERM (multiprocessing's, as the operator exits) as one
    # without a JVM does: Java's handler ran the JVM's shutdown into JPype, a SIGSEGV.
    for pid in jvms:
        os.kill(pid, signal.SIGTERM)
    wait_until(lambda: not any(_runs_a_jvm(pid) for pid in jvms), 15, "the JVMs to end")
    crashes = [REPO / f"hs_err_pid{pid}.log" for pid in jvms]
    assert not [log for log in crashes if log.exists()]


def test_without_a_share_client_the_operator_holds_a_share_group_and_says_what_to_set(
    k8s: K8s,
    namespace: str,
    kafka: str,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    operator: Callable[..., Operator],
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, 1_000)
    operator(env={CLASSPATH_ENV: None})
    manifest = consumer_group(
        "unread",
        kafka,
        topic,
        image=IMAGE,
        group_type="share",
        autoscaling={"max_replicas": 4, "lag_per_replica": 100},
    )
    apply(k8s, namespace, manifest)

    def degraded() -> dict[str, str]:
        return condition(get(k8s, namespace, "kcg", "unread"), "Degraded")

    wait_until(
        lambda: degraded().get("reason") == "ShareClientUnavailable", 60, "Degraded", every=0.5
    )
    assert CLASSPATH_ENV in degraded()["message"]
    assert "--share-classpath" in degraded()["message"]
    assert "holding 1 replicas" in degraded()["message"]
    assert replicas(k8s, namespace, "unread") == 1


def test_a_share_group_the_workers_cannot_run_is_refused_naming_the_field(
    k8s: K8s,
    namespace: str,
    kafka: str,
    topic_factory: TopicFactory,
    operator: Callable[..., Operator],
) -> None:
    """The API server refuses static membership and even_partitions (the CRD's rules); the
    operator reports kafleet's default image, which has no Java (InvalidSpec)."""
    topic = topic_factory(partitions=1)
    share = {"group_type": "share", "image": IMAGE}
    static = consumer_group("static", kafka, topic, static_membership=True, **share)
    even = consumer_group(
        "even", kafka, topic, autoscaling={"max_replicas": 4, "even_partitions": True}, **share
    )

    with pytest.raises(TestbedError, match=r"static_membership: share groups have no static"):
        apply(k8s, namespace, static)
    with pytest.raises(TestbedError, match=r"autoscaling\.even_partitions: a share group"):
        apply(k8s, namespace, even)
    apply(k8s, namespace, {**static, "spec": {**static["spec"], "group_type": "consumer"}})

    operator(env={CLASSPATH_ENV: None})
    javaless = consumer_group("javaless", kafka, topic, group_type="share", image="kafleet:0.9.0")
    apply(k8s, namespace, javaless)

    def degraded() -> dict[str, str]:
        return condition(get(k8s, namespace, "kcg", "javaless"), "Degraded")

    wait_until(lambda: degraded().get("reason") == "InvalidSpec", 60, "InvalidSpec", every=0.5)
    assert (
        "image: kafleet:0.9.0 is kafleet's default image, which has no Java"
        in (degraded()["message"])
    )
