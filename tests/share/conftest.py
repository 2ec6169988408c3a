"""Fixtures for the share-group tests against the real broker: share consumers that are always
closed, a log of every poll they made (what each acquired, with its delivery count), a handlers'
journal, the group's lag as Kafka's own tool reports it, and a reader of whole topics."""

from __future__ import annotations

import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import pytest
from confluent_kafka import Consumer, Message

from kafleet import ConsumerConfig, Record
from kafleet.share.client import ShareRecord
from kafleet.share.share_consumer import ShareConsumer
from tests.conftest import REPO
from tests.infra import kafka as kafka_infra
from tests.infra.records import record_number


@dataclass(frozen=True)
class Poll:
    """One poll of one member: when, with which limit its client was opened, what it got."""

    at: float
    limit: int
    numbers: tuple[int, ...]
    delivery_counts: tuple[int, ...]

    @property
    def size(self) -> int:
        return len(self.numbers)


@dataclass
class PollLog:
    """Every non-empty poll of a share consumer's members, in the order they happened."""

    polls: list[Poll] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, poll: Poll) -> None:
        with self._lock:
            self.polls.append(poll)

    def snapshot(self) -> list[Poll]:
        with self._lock:
            return list(self.polls)

    def deliveries(self, number: int) -> list[int]:
        """The delivery counts the record ``number`` was acquired with, in order."""
        return [
            count
            for poll in self.snapshot()
            for n, count in zip(poll.numbers, poll.delivery_counts, strict=True)
            if n == number
        ]


def watch_polls(consumer: ShareConsumer) -> PollLog:
    """Log every poll of ``consumer``'s members (call it before ``start``): each member's
    client is opened through ``_open_client`` with the limit it polls with."""
    log = PollLog()
    open_client = consumer._open_client

    def open_logged(max_poll_records: int) -> Any:
        client = open_client(max_poll_records)
        poll = client.poll

        def logged(timeout_s: float) -> list[ShareRecord]:
            records = poll(timeout_s)
            if records:
                log.add(
                    Poll(
                        time.monotonic(),
                        max_poll_records,
                        tuple(record_number(r.record.value or b"") for r in records),
                        tuple(r.delivery_count for r in records),
                    )
                )
            return records

        client.poll = logged  # type: ignore[method-assign]
        return client

    consumer._open_client = open_logged  # type: ignore[method-assign]
    return log


class StartShare(Protocol):
    def __call__(
        self, config: ConsumerConfig, handler: Any, **kwargs: Any
    ) -> tuple[ShareConsumer, PollLog]: ...


@pytest.fixture
def start_share() -> Iterator[StartShare]:
    """``start_share(config, handler, **kwargs)``: a ``ShareConsumer`` started now, its polls
    logged, and stopped and closed after the test."""
    started: list[ShareConsumer] = []

    def start(config: ConsumerConfig, handler: Any, **kwargs: Any) -> tuple[ShareConsumer, PollLog]:
        consumer = ShareConsumer(config, handler, **kwargs)
        polls = watch_polls(consumer)
        started.append(consumer)
        consumer.start()
        return consumer, polls

    yield start
    for consumer in started:
        consumer.stop(grace_s=5)
    for consumer in started:
        assert consumer.wait(timeout=60), "a share consumer did not stop within 60 s"


@dataclass
class Handled:
    number: int
    started: float
    ended: float


@dataclass
class Journal:
    """A thread-safe log of every call of a handler, and of every call that finished."""

    calls: list[int] = field(default_factory=list)
    done: list[Handled] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def handler(
        self,
        delay: float = 0.0,
        fail: Callable[[int, int], bool] = lambda number, call: False,
    ) -> Callable[[Record], int]:
        """A handler that sleeps ``delay``, then raises if ``fail(number, call)`` (``call``
        counts this record's calls from 1), else returns the record's number."""

        def handle(record: Record) -> int:
            number = record_number(record.value or b"")
            started = time.monotonic()
            with self._lock:
                self.calls.append(number)
                call = self.calls.count(number)
            time.sleep(delay)
            if fail(number, call):
                raise ValueError(f"cannot bill record {number} (call {call})")
            with self._lock:
                self.done.append(Handled(number, started, time.monotonic()))
            return number

        return handle

    def numbers(self) -> Counter[int]:
        with self._lock:
            return Counter(h.number for h in self.done)

    def calls_of(self, number: int) -> int:
        with self._lock:
            return self.calls.count(number)

    def count(self) -> int:
        with self._lock:
            return len(self.done)


@pytest.fixture
def journal() -> Journal:
    return Journal()


def read_topic(kafka: str, topic: str, count: int, timeout: float = 30) -> list[Message]:
    """Every record of ``topic`` from the start, waiting up to ``timeout`` for ``count``."""
    reader = Consumer(
        {
            "bootstrap.servers": kafka,
            "group.id": f"reader-{topic}-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
        }
    )
    reader.subscribe([topic])
    got: list[Message] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < count and time.monotonic() < deadline:
            got.extend(m for m in reader.consume(100, 0.5) if m.error() is None)
    finally:
        reader.close()
    return got


def share_group_command(kafka: str, group: str, *what: str, check: bool = True) -> list[list[str]]:
    """``ShareGroupCommand --describe`` (Kafka's own tool) of ``group``: the table's rows,
    its header first, each split on whitespace (``check=False``: [] when it prints none)."""
    done = subprocess.run(
        [
            "java",
            "-cp",
            f"{kafka_infra.libs_dir()}/*",
            "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
            "--bootstrap-server",
            kafka,
            "--describe",
            "--group",
            group,
            *what,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    rows = [line.split() for line in done.stdout.splitlines() if line.strip()]
    table = done.returncode == 0 and bool(rows) and rows[0][0] == "GROUP"
    assert table or not check, done.stdout + done.stderr
    return rows if table else []


def share_group_lag(kafka: str, group: str) -> dict[tuple[str, int], int | None]:
    """The group's lag per partition as ``ShareGroupCommand --offsets`` shows it (None where it
    prints ``-``)."""
    header, *rows = share_group_command(kafka, group, "--offsets")
    topic, partition, lag = (header.index(name) for name in ("TOPIC", "PARTITION", "LAG"))
    return {
        (row[topic], int(row[partition])): None if row[lag] == "-" else int(row[lag])
        for row in rows
    }


def share_group_assignments(kafka: str, group: str) -> list[str]:
    """Each member's assignment (``topic:partition,...``) as ``ShareGroupCommand --members``
    shows it; ``""`` for a member with none yet."""
    table = share_group_command(kafka, group, "--members", check=False)
    if not table:
        return []
    header, *rows = table
    count = header.index("#PARTITIONS")
    return [row[count + 1] if len(row) > count + 1 else "" for row in rows]
