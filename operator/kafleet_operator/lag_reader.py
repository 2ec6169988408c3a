"""Reading a group's lag from Kafka: the operator's one Kafka edge.

Owns: for a consumer group and its topics, each partition's committed offset and log-end
offset (``Consumer.committed`` and the watermarks, from a client that never joins the
group), the lag of a partition with no commit (as KEDA counts it: its backlog from the
earliest offset with ``auto_offset_reset: earliest``, 1 with ``latest``, so a new group is
not scaled to zero before its first commit; 0 with ``zero_without_commit``), and naming
topics that do not exist. Read from Kafka, not from the workers, so it is right at zero
replicas (as KEDA does). Blocking calls with timeouts: run it in a thread.

A partition whose offsets cannot be read is unknown, never zero: the reading fails
(``LagUnreadableError``, naming it) at the first such partition, so an outage costs one timeout
per pass, not one per partition. A coordinator that is moving or loading is asked again
within the same timeout.

The client connects as the group's workers do: its ``security`` renders the same librdkafka
properties (``kafleet.security.Security.properties``). ``LagReader`` keeps one client and makes
a new one when the address, the group or the credentials change (a rotated password), judged
by a digest of the properties, never by keeping them. librdkafka retries a failed SASL
handshake quietly until a call times out with a bare transport error; this client listens for
the authentication failure and raises it at once, so a wrong password reads as one.

SSL file locations (``ssl_ca_location``, ...) name files in the workers' pods: the operator
reads them at the same paths in its own pod, and a missing one is an error naming it.

Does not own what the lag means (``scaling.py``) nor where the passwords come from
(``credentials.py``).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from kafleet.security import Security

TP = tuple[str, int]
TIMEOUT_S = 10.0
RETRY_S = 0.2
COORDINATOR_MOVING = {
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
}


class LagUnreadableError(Exception):
    """A partition's offsets could not be read: the lag is unknown, not zero."""

    def __init__(self, partition: str, cause: KafkaException) -> None:
        super().__init__(f"the offsets of {partition} cannot be read: {describe(cause)}")
        self.partition = partition


METADATA_TRY_S = 0.5  # how often a metadata request gives a reported auth failure a look


@dataclass(frozen=True)
class LagReading:
    committed: dict[TP, int | None] = field(default_factory=dict)
    ends: dict[TP, int] = field(default_factory=dict)
    lag: dict[TP, int] = field(default_factory=dict)
    missing_topics: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.lag.values())

    @property
    def max_partition(self) -> int:
        return max(self.lag.values(), default=0)

    @property
    def partitions(self) -> int:
        return len(self.ends)

    @property
    def end_total(self) -> int:
        return sum(self.ends.values())

    @property
    def committed_total(self) -> int:
        return sum(self.ends[tp] - lag for tp, lag in self.lag.items())


def is_authentication_failure(exc: KafkaException) -> bool:
    error = exc.args[0] if exc.args else None
    return isinstance(error, KafkaError) and error.code() == KafkaError._AUTHENTICATION


def describe(exc: KafkaException) -> str:
    """The client's words, without the timing that changes at every try (a condition's
    message should not change while nothing does)."""
    error = exc.args[0] if exc.args else None
    text = error.str() if isinstance(error, KafkaError) else str(exc)
    return re.sub(r" \(after \d+ms in state \w+\)", "", text)


class LagClient:
    """A client of the group that never joins it: it only reads offsets. (The admin API's
    ``list_consumer_group_offsets`` crashed confluent-kafka 2.16.1 on a cluster whose offsets
    topic did not exist yet; ``Consumer.committed`` is the long-standing way.)"""

    def __init__(self, bootstrap: str, group_id: str, security: Security) -> None:
        self.authentication_error: KafkaError | None = None
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group_id,
                "enable.auto.commit": False,
                **security.properties(),
                "error_cb": self._on_error,
            }
        )

    def _on_error(self, error: KafkaError) -> None:
        if error.code() == KafkaError._AUTHENTICATION:
            self.authentication_error = error

    def metadata(self) -> Any:
        """The cluster's topics (a ``ClusterMetadata``); raises the authentication failure as
        soon as it is known."""
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            remaining = deadline - time.monotonic()
            try:
                return self.consumer.list_topics(timeout=max(0.1, min(METADATA_TRY_S, remaining)))
            except KafkaException:
                self.consumer.poll(0)  # serves error_cb
                if self.authentication_error is not None:
                    raise KafkaException(self.authentication_error) from None
                if remaining <= METADATA_TRY_S:
                    raise

    def close(self) -> None:
        self.consumer.close()


def _committed(consumer: Consumer, tps: list[TP]) -> dict[TP, int | None]:
    """The group's committed offsets (None: nothing committed), asked again while its
    coordinator moves or loads, within one ``TIMEOUT_S``."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        remaining = max(0.1, deadline - time.monotonic())
        try:
            answer = consumer.committed([TopicPartition(t, p) for t, p in tps], timeout=remaining)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            moving = isinstance(error, KafkaError) and error.code() in COORDINATOR_MOVING
            if not moving or time.monotonic() + RETRY_S >= deadline:
                raise
            time.sleep(RETRY_S)
            continue
        return {(tp.topic, tp.partition): tp.offset if tp.offset >= 0 else None for tp in answer}


def read_lag(
    client: LagClient,
    topics: list[str],
    topic_pattern: str | None = None,
    reset_earliest: bool = True,
    zero_without_commit: bool = False,
) -> LagReading:
    """Raises ``KafkaException`` when the cluster cannot be reached or refuses the client,
    ``LagUnreadableError`` at the first partition whose offsets cannot be read."""
    metadata = client.metadata()
    if topic_pattern:
        pattern = re.compile(topic_pattern)
        chosen = [t for t in metadata.topics if pattern.match(t) and not t.startswith("__")]
        missing: list[str] = []
    else:
        chosen = [t for t in topics if t in metadata.topics]
        missing = [t for t in topics if t not in metadata.topics]
    tps = [(t, p) for t in sorted(chosen) for p in sorted(metadata.topics[t].partitions)]
    if not tps:
        return LagReading(missing_topics=missing)
    consumer = client.consumer
    committed = _committed(consumer, tps)
    ends, lag = {}, {}
    for tp in tps:
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(*tp), timeout=TIMEOUT_S)
        except KafkaException as exc:  # no leader (a broker down, a new partition): unknown
            raise LagUnreadableError(f"{tp[0]}[{tp[1]}]", exc) from exc
        ends[tp] = high
        base = committed.get(tp)
        if base is not None:
            lag[tp] = max(0, high - base)
        elif zero_without_commit:
            lag[tp] = 0
        else:
            lag[tp] = max(0, high - low) if reset_earliest else 1
    return LagReading(committed, ends, lag, missing)


def _digest(bootstrap: str, group_id: str, security: Security) -> str:
    rendered = json.dumps([bootstrap, group_id, security.properties()], sort_keys=True)
    return hashlib.sha256(rendered.encode()).hexdigest()


class LagReader:
    """One ConsumerGroup's lag client, made anew when its address, group or credentials
    change; a client whose credentials were refused is not kept."""

    def __init__(self) -> None:
        self.client: LagClient | None = None
        self._digest = ""

    def read(
        self,
        bootstrap: str,
        group_id: str,
        security: Security,
        topics: list[str],
        topic_pattern: str | None = None,
        reset_earliest: bool = True,
        zero_without_commit: bool = False,
    ) -> LagReading:
        digest = _digest(bootstrap, group_id, security)
        if self.client is None or digest != self._digest:
            self.close()
            self.client = LagClient(bootstrap, group_id, security)
            self._digest = digest
        try:
            return read_lag(self.client, topics, topic_pattern, reset_earliest, zero_without_commit)
        except KafkaException as exc:
            if is_authentication_failure(exc):
                self.close()  # the next pass tries afresh, with what the Secret says then
            raise

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
        self.client, self._digest = None, ""
