"""Fast writers of numbered, keyed test records, for the tests, the benchmarks and the demo.

Owns: producing N records whose key and value say which record they are, so that a reader can
check that nothing was lost, duplicated or reordered. Record ``i`` has key ``key-{i % keys}``
and a value that starts with ``{i}:`` and is padded to ``value_size`` bytes.

Also reads records back (``read_records``). Does not own: topics (``tests/conftest.py``'s
``topic_factory``) or any consumer.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer


def record_key(i: int, keys: int) -> bytes:
    return f"key-{i % keys}".encode()


def record_value(i: int, value_size: int) -> bytes:
    head = f"{i}:".encode()
    return head + b"x" * max(0, value_size - len(head))


def read_records(kafka: str, topic: str, count: int, timeout_s: float = 30.0) -> list[Message]:
    """Up to ``count`` records of ``topic`` from its start, read by a group of its own, within
    ``timeout_s`` (fewer if fewer came)."""
    reader = Consumer(
        {"bootstrap.servers": kafka, "group.id": f"reader-{topic}", "auto.offset.reset": "earliest"}
    )
    reader.subscribe([topic])
    got: list[Message] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        got.extend(m for m in reader.consume(100, 0.5) if m.error() is None)
    reader.close()
    return got


def record_number(value: bytes) -> int:
    """The ``i`` a value written by :func:`produce_numbered` carries."""
    return int(value.split(b":", 1)[0])


@dataclass
class ProduceReport:
    """What a call to :func:`produce_numbered` wrote."""

    count: int = 0
    seconds: float = 0.0
    per_partition: Counter[int] = field(default_factory=Counter)

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds else 0.0


def produce_numbered(
    bootstrap: str,
    topic: str,
    count: int,
    *,
    start: int = 0,
    keys: int = 100,
    value_size: int = 100,
    partition: int | None = None,
    config: dict[str, str | int] | None = None,
) -> ProduceReport:
    """Write records ``start .. start+count-1`` and wait until every one is acknowledged.

    Idempotent and ``acks=all``, so a successful return means each record is in the log exactly
    once. Raises ``KafkaException`` naming the first record that failed.
    """
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 500_000,
            "compression.type": "lz4",
            **(config or {}),
        }
    )
    report = ProduceReport()
    failures: list[str] = []

    def delivered(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            failures.append(f"{msg.topic()}[{msg.partition()}] key={msg.key()!r}: {err}")
        else:
            report.per_partition[msg.partition() or 0] += 1

    started = time.monotonic()
    for i in range(start, start + count):
        kwargs = {"partition": partition} if partition is not None else {}
        while True:
            try:
                producer.produce(
                    topic,
                    key=record_key(i, keys),
                    value=record_value(i, value_size),
                    on_delivery=delivered,
                    **kwargs,
                )
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    remaining = producer.flush(120)
    report.seconds = time.monotonic() - started
    if failures or remaining:
        raise KafkaException(
            KafkaError(
                KafkaError._FAIL,
                f"{len(failures)} records failed and {remaining} were not delivered to {topic}; "
                f"first: {failures[:1]}",
            )
        )
    report.count = count
    return report
