"""A bounded revoke: ``revoke_policy: wait`` waits for in-flight records no longer than a few
times the recent p99 handler latency (within ``drain_timeout_s``); ``abandon`` returns at once
and commits only what is done, the abandoned runs' completions ignored. While a revoke is
pending librdkafka fetches nothing for any partition, so this wait is the worker's stall.

On librdkafka's mock cluster (fast rebalances) and on the real broker.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, TopicPartition

from kafleet import ParallelConsumer, Record, load_config
from tests.conftest import TopicFactory
from tests.consumer.test_rebalance_pauses import SESSION_TIMEOUT_MS, _member_joins_and_leaves
from tests.infra.mock_kafka import PARTITIONS, MockCluster
from tests.infra.records import produce_numbered
from tests.infra.waiting import wait_until

Start = Callable[..., ParallelConsumer]
DRAIN_TIMEOUT_S = 20.0


def _committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        asked = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        return {tp.partition: tp.offset for tp in reader.committed(asked, timeout=10)}
    finally:
        reader.close()


def _a_revoke_with_hung_records(
    bootstrap: str, topic: str, group: str, policy: str, start: Start
) -> None:
    hang = threading.Event()  # set: every record from now on hangs until released
    release = threading.Event()
    handled = 0
    hung: dict[int, int] = {}  # partition -> offset of its record hanging in a handler
    lock = threading.Lock()

    def handle(record: Record) -> None:
        nonlocal handled
        if hang.is_set():
            with lock:
                hung.setdefault(record.partition, record.offset)
            release.wait(60)
            return
        release.wait(0.005)  # 5 ms: the recent p99 is about that
        with lock:
            handled += 1

    config = load_config(
        None,
        {
            "bootstrap_servers": bootstrap,
            "group_id": group,
            "topics": [topic],
            "ordering": "partition",
            "concurrency": PARTITIONS,
            "revoke_policy": policy,
            "drain_timeout_s": DRAIN_TIMEOUT_S,
            "session_timeout_ms": SESSION_TIMEOUT_MS,
            "on_failure": "stop-partition",
            "commit_interval_ms": 100,
            "kafka": {"topic.metadata.refresh.interval.ms": 1000},
        },
    )
    consumer = start(config, handle)
    wait_until(lambda: handled >= 400, 60, "400 records handled")
    hang.set()
    wait_until(lambda: len(hung) == PARTITIONS, 30, "a record of every partition to hang")
    try:
        taken = _member_joins_and_leaves(bootstrap, group, topic, "classic")
        assert taken, "the second member was given no partition"
        wait_until(lambda: consumer.stats.revokes, 30, "the revoke")
        _, seconds, revoked = consumer.stats.revokes[0]
        assert seconds < 2.0, (
            f"the {policy} revoke of {revoked} stalled the worker for {seconds:.1f} s "
            f"(drain_timeout_s {DRAIN_TIMEOUT_S:g}) behind records that hang"
        )
        committed = _committed(bootstrap, group, topic)
        for _, partition in revoked:  # what was done is committed; the hung record is not
            assert committed[partition] == hung[partition], (committed, hung)
    finally:
        release.set()


@pytest.mark.parametrize("policy", ["wait", "abandon"])
def test_a_revoke_behind_hung_records_is_short_and_commits_only_what_is_done_on_the_mock(
    policy: str, mock_kafka: MockCluster, start_consumer: Start
) -> None:
    topic = f"revoke-{policy}"
    mock_kafka.produce(topic, 4_000)
    _a_revoke_with_hung_records(
        mock_kafka.bootstrap, topic, f"g-revoke-{policy}", policy, start_consumer
    )


@pytest.mark.parametrize("policy", ["wait", "abandon"])
def test_a_revoke_behind_hung_records_is_short_and_commits_only_what_is_done_on_the_broker(
    policy: str,
    kafka: str,
    topic_factory: TopicFactory,
    group_id: Callable[[], str],
    start_consumer: Start,
) -> None:
    topic = topic_factory(partitions=PARTITIONS)
    produce_numbered(kafka, topic, 4_000)
    _a_revoke_with_hung_records(kafka, topic, group_id(), policy, start_consumer)
