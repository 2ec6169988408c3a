"""The Kafka test bed works: a real broker that topics, producers, groups and share groups use."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import (
    AcknowledgeType,
    Consumer,
    KafkaException,
    Message,
    ShareConsumer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from tests.conftest import TopicFactory
from tests.infra import kafka as kafka_infra
from tests.infra.records import ProduceReport, record_key, record_number, record_value


def _consume_all(consumer: Consumer, count: int, timeout: float = 30.0) -> list[Message]:
    got: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        for msg in consumer.consume(num_messages=500, timeout=0.5):
            if msg.error() is not None:
                raise KafkaException(msg.error())
            got.append(msg)
    return got


def _consumer(kafka: str, group: str, **extra: str | int | bool) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": kafka,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **extra,
        }
    )


def test_share_groups_are_enabled_on_the_broker(kafka_broker: kafka_infra.KafkaBroker) -> None:
    assert kafka_broker.features()["share.version"] >= 1


def test_admin_client_creates_a_topic_with_the_partitions_asked_for(
    admin: AdminClient, topic_factory: TopicFactory
) -> None:
    topic = topic_factory(partitions=6, configs={"retention.ms": "600000"})

    metadata = admin.list_topics(topic, timeout=10)

    assert sorted(metadata.topics[topic].partitions) == [0, 1, 2, 3, 4, 5]
    described = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])
    configs = next(iter(described.values())).result(timeout=10)
    assert configs["retention.ms"].value == "600000"


def test_keyed_records_round_trip_and_each_key_stays_on_one_partition(
    kafka: str,
    topic_factory: TopicFactory,
    group_id: Callable[[], str],
    produce: Callable[..., ProduceReport],
) -> None:
    topic = topic_factory(partitions=4)
    report = produce(topic, 2_000, keys=50, value_size=64)
    assert report.count == 2_000
    assert sum(report.per_partition.values()) == 2_000

    consumer = _consumer(kafka, group_id())
    consumer.subscribe([topic])
    try:
        messages = _consume_all(consumer, 2_000)
    finally:
        consumer.close()

    numbers = sorted(record_number(m.value() or b"") for m in messages)
    assert numbers == list(range(2_000))
    partitions_of_key: dict[bytes, set[int]] = defaultdict(set)
    for m in messages:
        i = record_number(m.value() or b"")
        assert m.key() == record_key(i, 50)
        assert m.value() == record_value(i, 64)
        partitions_of_key[m.key() or b""].add(m.partition() or 0)
    assert all(len(parts) == 1 for parts in partitions_of_key.values())


def test_committed_offset_of_a_group_is_seen_by_the_next_member(
    kafka: str,
    topic_factory: TopicFactory,
    group_id: Callable[[], str],
    produce: Callable[..., ProduceReport],
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, 100)
    group = group_id()

    first = _consumer(kafka, group)
    first.subscribe([topic])
    try:
        messages = _consume_all(first, 40)
        last = messages[39]
        first.commit(offsets=[TopicPartition(topic, 0, last.offset() + 1)], asynchronous=False)
    finally:
        first.close()

    second = _consumer(kafka, group)
    try:
        [committed] = second.committed([TopicPartition(topic, 0)], timeout=10)
        assert committed.offset == 40
        second.subscribe([topic])
        resumed = _consume_all(second, 60)
    finally:
        second.close()
    assert [record_number(m.value() or b"") for m in resumed] == list(range(40, 100))


def test_share_consumer_in_explicit_mode_receives_and_acknowledges_records(
    kafka: str,
    admin: AdminClient,
    topic_factory: TopicFactory,
    group_id: Callable[[], str],
    produce: Callable[..., ProduceReport],
) -> None:
    topic = topic_factory(partitions=2)
    produce(topic, 50)
    group = group_id()
    reset = ConfigEntry(
        "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET
    )
    for future in admin.incremental_alter_configs(
        [ConfigResource(ResourceType.GROUP, group, incremental_configs=[reset])]
    ).values():
        future.result(timeout=10)

    consumer = ShareConsumer(
        {
            "bootstrap.servers": kafka,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
        }
    )
    received: set[int] = set()
    acknowledged: dict[TopicPartition, set[int]] = defaultdict(set)

    def on_commit(offsets: dict[TopicPartition, set[int]], error: KafkaException | None) -> None:
        assert error is None, error
        for tp, done in offsets.items():
            acknowledged[TopicPartition(tp.topic, tp.partition)] |= done

    consumer.set_acknowledgement_commit_callback(on_commit)
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(received) < 50 and time.monotonic() < deadline:
            for msg in consumer.poll(1.0):
                assert msg.error() is None, msg.error()
                received.add(record_number(msg.value() or b""))
                consumer.acknowledge(msg, AcknowledgeType.ACCEPT)
            results = consumer.commit_sync(10)
            assert all(err is None for err in results.values()), results
    finally:
        consumer.close()

    assert received == set(range(50))
    assert sum(len(offsets) for offsets in acknowledged.values()) == 50


def test_a_missing_java_is_a_clear_failure_naming_the_tool(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    broker = kafka_infra.KafkaBroker(tmp_path / "broker", port=1, controller_port=2)

    with pytest.raises(kafka_infra.TestbedError, match=r"'java' was not found on PATH"):
        broker.start()


def test_cluster_ids_never_start_with_a_dash_that_the_storage_tool_would_take_for_an_option(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    drawn = iter([b"\xf8" + bytes(15), b"\x00" * 16])  # the first encodes to "-AAA..."
    monkeypatch.setattr(kafka_infra.uuid, "uuid4", lambda: type("U", (), {"bytes": next(drawn)}))

    cluster_id = kafka_infra.new_cluster_id()

    assert cluster_id == "AAAAAAAAAAAAAAAAAAAAAA"
