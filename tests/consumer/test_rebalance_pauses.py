"""A partition paused by back-pressure flows again after it is revoked and assigned back.

librdkafka keeps an application's pause across unassign and assign (librdkafka #1849), so a
partition kafleet paused, revoked and later given back would stay paused for ever unless
kafleet resumes it. On librdkafka's mock cluster (fast) and on the real broker.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer

from kafleet import ParallelConsumer, Record, load_config
from tests.conftest import TopicFactory
from tests.infra.mock_kafka import PARTITIONS, MockCluster
from tests.infra.records import produce_numbered
from tests.infra.waiting import wait_until

Start = Callable[..., ParallelConsumer]
# The mock's coordinator lets a classic rebalance wait for the session timeout: keep it short.
SESSION_TIMEOUT_MS = 6_000


def _member_joins_and_leaves(bootstrap: str, group: str, topic: str, protocol: str) -> set[int]:
    """A plain second member joins, is given partitions, and leaves: what it was given."""
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": protocol,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "topic.metadata.refresh.interval.ms": 1000,
    }
    if protocol == "classic":
        config["partition.assignment.strategy"] = "cooperative-sticky"
        config["session.timeout.ms"] = SESSION_TIMEOUT_MS
    second = Consumer(config)
    second.subscribe([topic])
    deadline = time.monotonic() + 60
    while not second.assignment() and time.monotonic() < deadline:
        second.poll(0.1)
    taken = {tp.partition for tp in second.assignment()}
    second.close()
    return taken


def _paused_partitions_flow_again_after_a_round_trip(
    bootstrap: str, topic: str, group: str, protocol: str, start: Start
) -> None:
    gate = threading.Event()  # every handler blocks until the rebalance is over
    handled: Counter[int] = Counter()
    lock = threading.Lock()

    def handle(record: Record) -> None:
        gate.wait()
        with lock:
            handled[record.partition] += 1

    config = load_config(
        None,
        {
            "bootstrap_servers": bootstrap,
            "group_id": group,
            "topics": [topic],
            "group_protocol": protocol,
            "ordering": "partition",
            "on_failure": "stop-partition",  # no dead-letter topic: the mock cannot create one
            "concurrency": PARTITIONS,
            "max_poll_records": 10,
            "queue": {"max_records": 20},
            "drain_timeout_s": 0.5,
            "commit_interval_ms": 200,
            "kafka": {"topic.metadata.refresh.interval.ms": 1000},
            **({"session_timeout_ms": SESSION_TIMEOUT_MS} if protocol == "classic" else {}),
        },
    )
    consumer = start(config, handle)

    def paused() -> set[int]:
        parts = consumer.snapshot()["partitions"].values()
        return {p["partition"] for p in parts if p["paused"]}

    wait_until(lambda: len(paused()) == PARTITIONS, 60, "every partition paused behind its queue")
    taken = _member_joins_and_leaves(bootstrap, group, topic, protocol)
    assert taken, "the second member was given no partition"
    wait_until(
        lambda: len(consumer.poller.assignment) == PARTITIONS and consumer.stats.revoked,
        60,
        f"partitions {sorted(taken)} to come back",
    )
    gate.set()
    try:
        wait_until(lambda: all(handled[p] >= 100 for p in range(PARTITIONS)), 30, "every partition")
    except AssertionError as exc:
        raise AssertionError(
            f"{exc} to flow again: handled per partition {dict(handled)}; the second member "
            f"had {sorted(taken)}"
        ) from None


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_paused_partitions_flow_again_when_assigned_back_on_the_mock_cluster(
    protocol: str, mock_kafka: MockCluster, start_consumer: Start
) -> None:
    topic = f"paused-{protocol}"
    mock_kafka.produce(topic, 2_000)
    _paused_partitions_flow_again_after_a_round_trip(
        mock_kafka.bootstrap, topic, f"g-paused-{protocol}", protocol, start_consumer
    )


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_paused_partitions_flow_again_when_assigned_back_on_the_real_broker(
    protocol: str,
    kafka: str,
    topic_factory: TopicFactory,
    group_id: Callable[[], str],
    start_consumer: Start,
) -> None:
    topic = topic_factory(partitions=PARTITIONS)
    produce_numbered(kafka, topic, 2_000)
    _paused_partitions_flow_again_after_a_round_trip(
        kafka, topic, group_id(), protocol, start_consumer
    )
