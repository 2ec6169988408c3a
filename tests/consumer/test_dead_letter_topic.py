"""The dead-letter topic is checked at start, on a broker that does not create topics by itself
(the test broker, like most production ones): a missing one is created with the source topic's
partitions (``dead_letter_create``, the default) or the worker stops at once, naming it."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from kafleet import ParallelConsumer, Record
from kafleet.engine import dead_letter
from kafleet.engine.dead_letter import dead_letter_partitions
from kafleet.errors import ConfigError
from tests.conftest import REPO, ConfigFactory, TopicFactory
from tests.infra import kafka as kafka_infra
from tests.infra.records import ProduceReport, read_records, record_number
from tests.infra.waiting import wait_until

Start = Callable[..., ParallelConsumer]


def partitions_of(admin: AdminClient, topic: str) -> int | None:
    """The topic's partition count, or None if the broker does not have it."""
    metadata = admin.list_topics(timeout=10).topics.get(topic)
    return None if metadata is None or metadata.error is not None else len(metadata.partitions)


def partitions_once_seen(admin: AdminClient, topic: str) -> int | None:
    """The topic's partition count once the broker's metadata shows it (a topic just created
    may take a moment to appear there)."""
    wait_until(lambda: partitions_of(admin, topic) is not None, 10, f"{topic} in the metadata")
    return partitions_of(admin, topic)


def unique_name(topic: str, suffix: str) -> str:
    return f"{topic}.{suffix}"


def test_the_broker_of_the_tests_does_not_create_topics_by_itself(
    kafka: str, admin: AdminClient
) -> None:
    """What makes the tests below mean something: producing to a missing topic fails."""
    producer = Producer({"bootstrap.servers": kafka, "message.timeout.ms": 3000})
    outcome: list[object] = []
    producer.produce("nobody-made-this-topic", b"x", on_delivery=lambda e, m: outcome.append(e))
    producer.flush(10)

    assert len(outcome) == 1
    assert outcome[0] is not None  # the delivery failed
    assert partitions_of(admin, "nobody-made-this-topic") is None


def test_a_poison_record_reaches_a_dead_letter_topic_that_nobody_created(
    kafka: str,
    admin: AdminClient,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    consumer_config: ConfigFactory,
    start_consumer: Start,
    committed_offsets: Callable[[str, str, int], dict[int, int]],
    end_offsets: Callable[[str, int], dict[int, int]],
) -> None:
    topic = topic_factory(partitions=3)
    dead = unique_name(topic, "dlq")
    produce(topic, 100)

    def handle(record: Record) -> None:
        if record_number(record.value or b"") == 42:
            raise ValueError("cannot bill record 42")

    config = consumer_config(
        topic, dead_letter_topic=dead, retry={"max_attempts": 2, "initial_backoff_ms": 10}
    )
    consumer = start_consumer(config, handle)

    wait_until(lambda: consumer.snapshot()["dead_lettered"] == 1, 40, "the poison record parked")
    wait_until(
        lambda: committed_offsets(config.group_id, topic, 3) == end_offsets(topic, 3),
        30,
        "commits past the poison record",
    )
    parked = read_records(kafka, dead, 1)
    assert [record_number(m.value()) for m in parked] == [42]
    assert partitions_once_seen(admin, dead) == 3


def test_a_missing_dead_letter_topic_is_created_at_start_with_the_source_topics_partitions(
    admin: AdminClient,
    topic_factory: TopicFactory,
    consumer_config: ConfigFactory,
    start_consumer: Start,
) -> None:
    topic = topic_factory(partitions=4)
    assert partitions_once_seen(admin, topic) == 4
    config = consumer_config(topic)  # the default name: <group_id>.dlq
    assert partitions_of(admin, config.effective_dead_letter_topic) is None

    start_consumer(config, lambda record: None)

    assert partitions_once_seen(admin, config.effective_dead_letter_topic) == 4


def test_an_existing_dead_letter_topic_is_left_as_it_is(
    admin: AdminClient,
    topic_factory: TopicFactory,
    consumer_config: ConfigFactory,
    start_consumer: Start,
) -> None:
    topic, dead = topic_factory(partitions=4), topic_factory(partitions=1)

    start_consumer(consumer_config(topic, dead_letter_topic=dead), lambda record: None)

    assert partitions_once_seen(admin, dead) == 1


def test_with_topic_pattern_the_dead_letter_topic_gets_the_most_partitions_of_a_matching_topic(
    admin: AdminClient,
    topic_factory: TopicFactory,
    consumer_config: ConfigFactory,
    start_consumer: Start,
) -> None:
    small, large = topic_factory(partitions=2), topic_factory(partitions=5)
    common = small.partition("-")[2]  # t0-<test>-<id>, t1-<test>-<id>
    pattern = r"^t\d-" + re.escape(common.rsplit("-", 1)[0]) + "-"
    assert re.match(pattern, large)
    assert (partitions_once_seen(admin, small), partitions_once_seen(admin, large)) == (2, 5)
    config = consumer_config(small, topics=[], topic_pattern=pattern)

    start_consumer(config, lambda record: None)

    assert partitions_once_seen(admin, config.effective_dead_letter_topic) == 5


def test_without_dead_letter_create_a_missing_topic_stops_the_start_naming_the_field(
    admin: AdminClient, topic_factory: TopicFactory, consumer_config: ConfigFactory
) -> None:
    topic = topic_factory(partitions=2)
    dead = unique_name(topic, "parked")
    config = consumer_config(topic, dead_letter_topic=dead, dead_letter_create=False)
    consumer = ParallelConsumer(config, lambda record: None)

    with pytest.raises(ConfigError) as caught:
        consumer.start()

    assert caught.value.fields == ("dead_letter_topic",)
    assert dead in str(caught.value)
    assert "dead_letter_create" in str(caught.value)
    assert partitions_of(admin, dead) is None


def test_the_worker_command_without_dead_letter_create_ends_cleanly_naming_the_topic(
    kafka: str, topic_factory: TopicFactory, group_id: Callable[[], str], tmp_path: Path
) -> None:
    topic = topic_factory()
    path = tmp_path / "worker.yaml"
    path.write_text(
        f"bootstrap_servers: {kafka}\ngroup_id: {group_id()}\ntopics: [{topic}]\n"
        f"handler: json:dumps\ndead_letter_topic: {topic}.parked\ndead_letter_create: false\n"
    )

    done = subprocess.run(
        [str(Path(sys.executable).with_name("kafleet")), "worker", "--config", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=90,
    )

    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, done.stderr
    assert "dead_letter_topic" in done.stderr
    assert f"{topic}.parked" in done.stderr


def test_a_cluster_that_does_not_answer_at_start_gets_the_check_before_the_first_record_parks(
    kafka_broker: kafka_infra.KafkaBroker,
    admin: AdminClient,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    consumer_config: ConfigFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The consumer waits for Kafka to come back; the dead-letter check must not stop it."""
    topic = topic_factory(partitions=2)
    assert partitions_once_seen(admin, topic) == 2
    dead = unique_name(topic, "dlq")
    config = consumer_config(
        topic, dead_letter_topic=dead, retry={"max_attempts": 1, "initial_backoff_ms": 0}
    )

    def handle(record: Record) -> None:
        if record_number(record.value or b"") == 7:
            raise ValueError("cannot bill record 7")

    monkeypatch.setattr(dead_letter, "START_CHECK_S", 2.0)
    kafka_broker.stop()
    try:
        consumer = ParallelConsumer(config, handle).start()
    finally:
        kafka_broker.start()
    try:
        produce(topic, 20)
        wait_until(lambda: consumer.snapshot()["dead_lettered"] == 1, 60, "record 7 parked")
        assert consumer.snapshot()["records_processed"] == 19
        assert partitions_once_seen(admin, dead) == 2
    finally:
        consumer.close(grace_s=5)


def test_stop_partition_needs_no_dead_letter_topic(
    admin: AdminClient,
    topic_factory: TopicFactory,
    consumer_config: ConfigFactory,
    start_consumer: Start,
) -> None:
    topic = topic_factory(partitions=2)
    config = consumer_config(topic, on_failure="stop-partition")

    start_consumer(config, lambda record: None)

    assert partitions_of(admin, config.effective_dead_letter_topic) is None


@pytest.mark.parametrize(
    ("existing", "topics", "pattern", "partitions"),
    [
        ({"orders": 6}, ["orders"], None, 6),
        ({"orders": 6, "refunds": 12}, ["orders", "refunds"], None, 12),
        ({"orders": 6}, ["orders", "not-yet"], None, 6),
        ({}, ["not-yet"], None, 1),
        ({"orders.eu": 3, "orders.us": 8, "returns": 20}, [], r"orders\..*", 8),
        ({"orders.eu": 3, "__orders": 50}, [], r".*orders.*", 3),
        ({"returns": 20}, [], "orders", 1),
    ],
)
def test_the_partition_count_of_a_created_dead_letter_topic(
    existing: dict[str, int], topics: list[str], pattern: str | None, partitions: int
) -> None:
    assert dead_letter_partitions(existing, topics, pattern) == partitions
