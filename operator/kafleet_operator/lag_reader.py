"""Reading a group's lag from Kafka: the operator's one Kafka edge.

Owns: for a consumer group and its topics, each partition's committed offset and log-end
offset (``Consumer.committed`` and the watermarks, from a client that never joins the
group), the lag of a partition with no commit (from its earliest offset, as
``auto_offset_reset: earliest`` would read it, or none with ``latest``), and naming topics
that do not exist. Read from Kafka, not from the workers, so it is right at zero replicas
(as KEDA does). Blocking calls with timeouts: run it in a thread. Does not own what the lag
means (``scaling.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaException, TopicPartition

TP = tuple[str, int]
TIMEOUT_S = 10.0


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


def reader(bootstrap: str, group_id: str, properties: dict[str, str]) -> Consumer:
    """A client of the group that never joins it: it only reads offsets. (The admin API's
    ``list_consumer_group_offsets`` crashed confluent-kafka 2.16.1 on a cluster whose offsets
    topic did not exist yet; ``Consumer.committed`` is the long-standing way.)"""
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group_id,
            "enable.auto.commit": False,
            **properties,
        }
    )


def read_lag(
    client: Consumer,
    topics: list[str],
    topic_pattern: str | None = None,
    reset_earliest: bool = True,
) -> LagReading:
    """Raises ``KafkaException`` when the cluster cannot be reached."""
    metadata = client.list_topics(timeout=TIMEOUT_S)
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
    committed: dict[TP, int | None] = {
        (tp.topic, tp.partition): tp.offset if tp.offset >= 0 else None
        for tp in client.committed([TopicPartition(t, p) for t, p in tps], timeout=TIMEOUT_S)
    }
    ends, lag = {}, {}
    for tp in tps:
        try:
            low, high = client.get_watermark_offsets(TopicPartition(*tp), timeout=TIMEOUT_S)
        except KafkaException:  # a new partition without a leader yet: nothing to read
            low = high = 0
        ends[tp] = high
        base = committed.get(tp)
        if base is None:
            base = low if reset_earliest else high
        lag[tp] = max(0, high - base)
    return LagReading(committed, ends, lag, missing)
