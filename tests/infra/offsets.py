"""Reading a group's committed offsets and a topic's log ends from the outside, by a client of
their own, as Kafka's ConsumerGroupCommand does: what tests check delivery against; and
committing offsets as a consumer does, for tests that need a group with commits.

Owns: asking again while a coordinator moves or loads, or a new topic's leader comes up (on a
cluster that rolls, both happen mid-test), up to a deadline. Does not own topics, producers or
the consumers under test.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

COORDINATOR_MOVING = {
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
}
LEADER_COMING_UP = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    # a new leader whose high watermark has not caught up with the ISR's yet (KIP-207)
    KafkaError.OFFSET_NOT_AVAILABLE,
}


def transient(exc: KafkaException, codes: set[int]) -> bool:
    """Whether ``exc`` is worth asking again: retriable by librdkafka's word or in ``codes``."""
    error = exc.args[0]
    return bool(error.retriable()) or error.code() in codes


T = TypeVar("T")


def again(call: Callable[[], T], timeout_s: float) -> T:
    """``call()``, asked again every 0.2 s while it fails transiently (a coordinator moving or
    loading), up to ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return call()
        except KafkaException as exc:
            if not transient(exc, COORDINATOR_MOVING) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def committed(
    bootstrap: str, group: str, topic: str, partitions: int, timeout_s: float = 20.0
) -> dict[int, int]:
    """Partition -> ``group``'s committed offset in ``topic`` (-1001 where none)."""
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    asked = [TopicPartition(topic, p) for p in range(partitions)]
    try:
        tps = again(lambda: reader.committed(asked, 10), timeout_s)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        reader.close()


def commit(
    bootstrap: str, group: str, topic: str, offsets: dict[int, int], timeout_s: float = 30.0
) -> None:
    """Commit ``offsets`` (partition -> offset) for ``group`` as a consumer does."""
    committer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    asked = [TopicPartition(topic, p, o) for p, o in offsets.items()]
    try:
        again(lambda: committer.commit(offsets=asked, asynchronous=False), timeout_s)
    finally:
        committer.close()


def log_ends(
    bootstrap: str, topic: str, partitions: int, timeout_s: float = 30.0
) -> dict[int, int]:
    """Partition -> ``topic``'s log-end offset (high watermark)."""
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "end-offsets-reader"})
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                marks = {
                    p: reader.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                    for p in range(partitions)
                }
                if all(m is not None for m in marks.values()):
                    return {p: m[1] for p, m in marks.items() if m is not None}
                if time.monotonic() > deadline:  # None: the question timed out
                    raise AssertionError(f"the log ends of {topic} timed out: {marks}")
            except KafkaException as exc:
                if not transient(exc, LEADER_COMING_UP) or time.monotonic() > deadline:
                    raise
            time.sleep(0.2)
    finally:
        reader.close()
