"""The test bed: fixtures that give every test real components, started by the project itself.

Owns: one Kafka broker per test session (``kafka_broker``, ``kafka``), factories for topics and
consumer groups with unique names, a fast producer of numbered records, and the report of a
failed test (the broker's log path and its last lines).

A component that cannot be provided fails the test with the reason (a missing Java, a broker
that would not start); nothing here skips.
"""

from __future__ import annotations

import functools
import itertools
import os
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.infra import kafka as kafka_infra
from tests.infra.records import ProduceReport, produce_numbered

_broker: kafka_infra.KafkaBroker | None = None


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[kafka_infra.KafkaBroker]:
    """A single-node Kafka broker started for this test session and stopped by its pid after."""
    global _broker
    workdir = kafka_infra.CACHE / "runs" / f"session-{os.getpid()}"
    try:
        broker = kafka_infra.start_broker(workdir)
    except kafka_infra.TestbedError as exc:
        pytest.fail(f"the test bed could not start Kafka: {exc}", pytrace=False)
    _broker = broker
    try:
        yield broker
    finally:
        broker.stop()
        _broker = None


@pytest.fixture(scope="session")
def kafka(kafka_broker: kafka_infra.KafkaBroker) -> str:
    """The bootstrap address (``host:port``) of the session's broker."""
    return kafka_broker.bootstrap


@pytest.fixture(scope="session")
def admin(kafka: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka})


def _unique(prefix: str, request: pytest.FixtureRequest) -> str:
    test = re.sub(r"[^a-zA-Z0-9]+", "-", request.node.name).strip("-")[:60]
    return f"{prefix}-{test}-{uuid.uuid4().hex[:8]}"


class TopicFactory(Protocol):
    def __call__(self, partitions: int = 1, configs: dict[str, str] | None = None) -> str: ...


@pytest.fixture
def topic_factory(admin: AdminClient, request: pytest.FixtureRequest) -> TopicFactory:
    """Create topics with unique names: ``topic_factory(partitions=4, configs={...})``."""
    counter = itertools.count()

    def create(partitions: int = 1, configs: dict[str, str] | None = None) -> str:
        name = _unique(f"t{next(counter)}", request)
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1, config=configs or {})]
        )
        futures[name].result(timeout=30)
        return name

    return create


@pytest.fixture
def group_id(request: pytest.FixtureRequest) -> Callable[[], str]:
    """Unique consumer group ids: ``group_id()``."""
    return functools.partial(_unique, "g", request)


@pytest.fixture
def produce(kafka: str) -> Callable[..., ProduceReport]:
    """``produce(topic, count, keys=100, value_size=100, partition=None, start=0)``: write
    numbered keyed records fast and wait for every acknowledgement (see tests/infra/records.py).
    """
    return functools.partial(produce_numbered, kafka)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    """On a failure in a test that used the broker, show where its log is and how it ends."""
    report = yield
    if (
        report.failed
        and _broker is not None
        and "kafka_broker" in getattr(item, "fixturenames", ())
    ):
        log: Path = _broker.log_path
        report.sections.append(
            ("kafka broker", f"log: {log}\n--- last lines ---\n{_broker.log_tail(30)}")
        )
    return report
