"""librdkafka's in-process mock cluster, shared by every client of a test.

Owns: starting a mock cluster (``test.mock.num.brokers``) inside a producer that is kept open
for the test, and finding its bootstrap address (the broker's advertised host and port, read
from metadata), so that kafleet's consumer, a second member and a producer all reach the same
cluster. A group rebalances in about a second and no JVM is started, which makes rebalance
logic cheap to test; each behaviour keeps one test on the real broker beside it.

The mock creates topics on first use with 4 partitions (its default); it does not implement
CreateTopics. Does not own the real broker (``kafka.py``).
"""

from __future__ import annotations

from confluent_kafka import Producer

from tests.infra.records import ProduceReport, produce_numbered

PARTITIONS = 4  # what the mock gives an auto-created topic


class MockCluster:
    def __init__(self) -> None:
        self._owner: Producer | None = Producer({"test.mock.num.brokers": 1, "log_level": 3})
        brokers = self._owner.list_topics(timeout=10).brokers
        if not brokers:
            raise RuntimeError("librdkafka's mock cluster reported no broker")
        broker = next(iter(brokers.values()))
        self.bootstrap = f"{broker.host}:{broker.port}"

    def produce(self, topic: str, count: int, **kwargs: object) -> ProduceReport:
        """``tests.infra.records.produce_numbered`` against this cluster (the topic is
        created with 4 partitions on first use)."""
        return produce_numbered(self.bootstrap, topic, count, **kwargs)  # type: ignore[arg-type]

    def close(self) -> None:
        if self._owner is not None:
            self._owner.flush(5)
            self._owner = None  # the cluster goes with its owner
