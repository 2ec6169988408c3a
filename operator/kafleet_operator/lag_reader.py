"""Reading a group's lag from Kafka's admin API: the operator's one Kafka edge.

Owns: for a consumer group and its topics, each partition's committed offset and log-end
offset (``list_consumer_group_offsets`` and ``list_offsets``), the lag of a partition with
no commit (from its earliest offset, as ``auto_offset_reset: earliest`` would read it, or none
with ``latest``), and naming topics that do not exist. Read from Kafka, not from the workers,
so it is right at zero replicas (as KEDA does). Blocking calls with timeouts: run it in a
thread. Does not own what the lag means (``scaling.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._listoffsets import OffsetSpec  # not re-exported for type checkers

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


def read_lag(
    admin: AdminClient,
    group_id: str,
    topics: list[str],
    topic_pattern: str | None = None,
    reset_earliest: bool = True,
) -> LagReading:
    """Raises ``KafkaException`` when the cluster cannot be reached."""
    metadata = admin.list_topics(timeout=TIMEOUT_S)
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
    request = [ConsumerGroupTopicPartitions(group_id, [TopicPartition(t, p) for t, p in tps])]
    result = admin.list_consumer_group_offsets(request, request_timeout=TIMEOUT_S)
    committed: dict[TP, int | None] = {}
    for future in result.values():
        for tp in future.result().topic_partitions:
            committed[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else None
    ends = _offsets(admin, tps, OffsetSpec.latest())  # type: ignore[no-untyped-call]
    starts = (
        _offsets(admin, tps, OffsetSpec.earliest())  # type: ignore[no-untyped-call]
        if reset_earliest
        else ends
    )
    lag = {}
    for tp in tps:
        base = committed.get(tp)
        if base is None:
            base = starts[tp]
        lag[tp] = max(0, ends[tp] - base)
    return LagReading(committed, ends, lag, missing)


def _offsets(admin: AdminClient, tps: list[TP], spec: OffsetSpec) -> dict[TP, int]:
    futures = admin.list_offsets(
        {TopicPartition(t, p): spec for t, p in tps}, request_timeout=TIMEOUT_S
    )
    out = {}
    for tp, future in futures.items():
        try:
            out[(tp.topic, tp.partition)] = future.result().offset
        except KafkaException:
            out[(tp.topic, tp.partition)] = 0
    return out
