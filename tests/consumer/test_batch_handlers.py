"""Batch handlers: a run of records in one call, under every ordering and guarantee; a batch
that fails is retried whole, then record by record, so only a poison record is parked."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Message

from kafleet import ParallelConsumer, batch_handler
from tests.conftest import ConfigFactory, TopicFactory
from tests.infra.records import ProduceReport, read_records, record_number
from tests.infra.waiting import wait_until

Start = Callable[..., ParallelConsumer]


class Batches:
    """Every batch a handler was called with: (partition, offsets, keys, numbers)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[tuple[int, list[int], list[bytes | None], list[int]]] = []

    def note(self, messages: list[Message]) -> None:
        with self.lock:
            self.calls.append(
                (
                    messages[0].partition() or 0,
                    [m.offset() or 0 for m in messages],
                    [m.key() for m in messages],
                    [record_number(m.value() or b"") for m in messages],
                )
            )

    def numbers(self) -> Counter[int]:
        with self.lock:
            return Counter(n for call in self.calls for n in call[3])


@pytest.mark.parametrize(
    ("ordering", "guarantee"),
    [
        ("partition", "at-least-once"),
        ("key", "at-least-once"),
        ("unordered", "at-least-once"),
        ("partition", "at-most-once"),
        ("key", "at-most-once"),
        ("unordered", "at-most-once"),
    ],
)
def test_every_record_reaches_a_batch_handler_once_and_its_offsets_are_committed(
    ordering: str,
    guarantee: str,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    consumer_config: ConfigFactory,
    start_consumer: Start,
    committed_offsets: Callable[[str, str, int], dict[int, int]],
    end_offsets: Callable[[str, int], dict[int, int]],
) -> None:
    topic = topic_factory(partitions=3)
    produce(topic, 3_000, keys=7)
    batches = Batches()
    config = consumer_config(
        topic, ordering=ordering, guarantee=guarantee, max_batch_records=100, concurrency=4
    )

    start_consumer(config, batch_handler(batches.note))
    wait_until(lambda: sum(batches.numbers().values()) >= 3_000, 60, "every record")
    wait_until(
        lambda: committed_offsets(config.group_id, topic, 3) == end_offsets(topic, 3),
        30,
        "the commits of every batch",
    )

    assert set(batches.numbers().values()) == {1}
    assert max(len(offsets) for _, offsets, _, _ in batches.calls) <= 100
    assert max(len(offsets) for _, offsets, _, _ in batches.calls) > 1, "never a real batch"
    for _, offsets, keys, _ in batches.calls:
        assert offsets == sorted(offsets)
        if ordering == "key":
            assert len(set(keys)) == 1, "a batch by key holds one key"
        elif ordering == "partition":
            assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))


def test_a_coroutine_batch_handler_takes_batches_too(
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    consumer_config: ConfigFactory,
    start_consumer: Start,
    committed_offsets: Callable[[str, str, int], dict[int, int]],
    end_offsets: Callable[[str, int], dict[int, int]],
) -> None:
    topic = topic_factory(partitions=2)
    produce(topic, 1_000)
    batches = Batches()

    @batch_handler
    async def handle(messages: list[Message]) -> None:
        await asyncio.sleep(0.001)
        batches.note(messages)

    config = consumer_config(topic, ordering="unordered", max_batch_records=50)
    start_consumer(config, handle)
    wait_until(lambda: sum(batches.numbers().values()) >= 1_000, 60, "every record")
    wait_until(
        lambda: committed_offsets(config.group_id, topic, 2) == end_offsets(topic, 2),
        30,
        "the commits",
    )

    assert set(batches.numbers().values()) == {1}
    assert 1 < max(len(call[1]) for call in batches.calls) <= 50


def test_a_poison_record_in_a_batch_alone_is_dead_lettered_after_the_batch_and_it_fail(
    kafka: str,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    consumer_config: ConfigFactory,
    start_consumer: Start,
    committed_offsets: Callable[[str, str, int], dict[int, int]],
    end_offsets: Callable[[str, int], dict[int, int]],
) -> None:
    topic = topic_factory(partitions=1)
    dead = topic_factory(partitions=1)
    produce(topic, 200)
    calls: list[list[int]] = []
    accepted: Counter[int] = Counter()

    @batch_handler
    def handle(messages: list[Message]) -> list[dict[str, Any]]:
        numbers = [record_number(m.value() or b"") for m in messages]
        calls.append(numbers)
        if 42 in numbers:
            raise ValueError("cannot bill record 42")
        accepted.update(numbers)
        return [{"n": n} for n in numbers]

    config = consumer_config(
        topic,
        dead_letter_topic=dead,
        max_batch_records=50,
        retry={"max_attempts": 2, "initial_backoff_ms": 10},
    )
    start_consumer(config, handle)
    wait_until(lambda: sum(accepted.values()) >= 199, 60, "every other record")
    wait_until(
        lambda: committed_offsets(config.group_id, topic, 1) == end_offsets(topic, 1),
        30,
        "commits past the poison record",
    )

    assert 42 not in accepted
    assert set(accepted.values()) == {1}
    with_poison = [call for call in calls if 42 in call]
    assert len(with_poison[0]) > 1  # the batch it came in ...
    assert len(with_poison[1]) == len(with_poison[0])  # ... was retried whole
    assert with_poison[2:] == [[42], [42]], "then it alone, with its own attempts"
    [parked] = read_records(kafka, dead, 1)
    assert record_number(parked.value() or b"") == 42
    assert dict(parked.headers() or [])["kafleet.error.message"] == b"cannot bill record 42"


def test_a_batch_that_fails_once_is_retried_whole_and_each_record_handled_once(
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    consumer_config: ConfigFactory,
    start_consumer: Start,
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, 300)
    failed: set[int] = set()
    accepted: Counter[int] = Counter()

    @batch_handler
    def handle(messages: list[Message]) -> None:
        first = record_number(messages[0].value() or b"")
        if first not in failed:  # every batch fails once: a database that blinked
            failed.add(first)
            raise ConnectionError("the database blinked")
        accepted.update(record_number(m.value() or b"") for m in messages)

    config = consumer_config(topic, retry={"max_attempts": 3, "initial_backoff_ms": 5})
    start_consumer(config, handle)
    wait_until(lambda: sum(accepted.values()) >= 300, 60, "every record")

    assert set(accepted.values()) == {1}


def test_a_batch_handler_returning_the_wrong_number_of_results_fails_the_batch_clearly(
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    consumer_config: ConfigFactory,
    start_consumer: Start,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = topic_factory(partitions=1)
    dead = topic_factory(partitions=1)
    produce(topic, 20)

    @batch_handler
    def handle(messages: list[Message]) -> list[int]:
        return [1]  # one result, whatever the batch

    config = consumer_config(
        topic, dead_letter_topic=dead, retry={"max_attempts": 1}, max_batch_records=5
    )
    consumer = start_consumer(config, handle)
    wait_until(lambda: consumer.stats.records_processed >= 20, 60, "every record, one by one")

    assert "returned 1 results for" in caplog.text
    assert consumer.stats.dead_lettered == 0
