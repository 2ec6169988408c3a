"""A partition that stops fetching is found, reported and recovered without a restart, on the
real broker (librdkafka#5586; ``engine/fetch_watch.py``).

The bug itself needs a group coordinator that moves at the wrong moment; the fault here is of
the same shape and of our own making: the partition is paused on the client behind kafleet's
back, so kafleet sees an assigned partition it did not pause, with records beyond its position,
that hands over nothing. Health and metrics are read from the outside, from the state file the
way the sidecar reads it; offsets by a separate client.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Message, Producer, TopicPartition
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from kafleet import ConsumerConfig, ParallelConsumer
from kafleet.sidecar.collector import StateCollector
from kafleet.sidecar.server import Sidecar
from tests.conftest import ConfigFactory, TopicFactory
from tests.consumer.conftest import Journal
from tests.infra.records import ProduceReport, record_value
from tests.infra.waiting import wait_until

BOUND_MS = 2000
BOUND_S = BOUND_MS / 1000
Offsets = Callable[..., dict[int, int]]


class FaultyClient(Consumer):
    """The real client, with a fault the test sets: ``stall`` has the Poller's thread, at its
    next ``consume()`` (a ``pause()`` from another thread waits on the one in ``consume()``),
    pause a partition behind kafleet's back, or take it out of the client's assignment (its
    fetcher stops, as librdkafka#5586 leaves one never started, while kafleet and the group
    still count it assigned). While the fault is ``sticky``, every resume, seek or assignment
    of that partition is undone at once, so restarting its fetch does not help until
    ``release``."""

    def __init__(self, conf: dict[str, Any]) -> None:
        super().__init__(conf)
        self.stuck: tuple[str, int] | None = None
        self.unassign = False
        self.sticky = False
        self.stalled_at: float | None = None  # when the fault took effect

    def stall(
        self, topic: str, partition: int, sticky: bool = False, unassign: bool = False
    ) -> None:
        self.sticky, self.unassign, self.stuck = sticky, unassign, (topic, partition)
        wait_until(lambda: self.stalled_at, 10, "the fault to take effect")

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        if self.stuck is not None and self.stalled_at is None:
            if self.unassign:
                super().incremental_unassign([TopicPartition(*self.stuck)])
            else:
                super().pause([TopicPartition(*self.stuck)])
            self.stalled_at = time.monotonic()
        return super().consume(num_messages=num_messages, timeout=timeout)

    def release(self) -> None:
        self.sticky = False

    def _undo(self, partitions: list[TopicPartition]) -> None:
        if self.sticky and any((p.topic, p.partition) == self.stuck for p in partitions):
            super().pause([TopicPartition(*self.stuck)])  # type: ignore[misc]

    def resume(self, partitions: list[TopicPartition]) -> None:
        super().resume(partitions)
        self._undo(partitions)

    def seek(self, partition: TopicPartition) -> None:
        super().seek(partition)
        self._undo([partition])

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        super().incremental_assign(partitions)
        self._undo(partitions)


Start = Callable[[ConsumerConfig, Any], tuple[ParallelConsumer, FaultyClient]]


@pytest.fixture
def start_faulty() -> Iterator[Start]:
    """``start_faulty(config, handler)``: a ParallelConsumer on a ``FaultyClient``, started now
    and closed after the test."""
    started: list[ParallelConsumer] = []

    def start(config: ConsumerConfig, handler: Any) -> tuple[ParallelConsumer, FaultyClient]:
        clients: list[FaultyClient] = []

        def client(conf: dict[str, Any]) -> FaultyClient:
            clients.append(FaultyClient(conf))
            return clients[-1]

        consumer = ParallelConsumer(config, handler)
        consumer.poller._consumer_factory = client  # the Poller's seam for its client
        started.append(consumer.start())
        wait_until(lambda: consumer.poller.joined, 30, "the consumer to join its group")
        return consumer, clients[0]

    yield start
    for consumer in started:
        consumer.stop(grace_s=5)
    for consumer in started:
        consumer.wait(timeout=30)


def watched(
    consumer_config: ConfigFactory, topic: str, state: Path, **fields: Any
) -> ConsumerConfig:
    return consumer_config(
        topic,
        fetch_stall_timeout_ms=BOUND_MS,
        statistics_interval_ms=200,
        state_file=str(state),
        state_interval_ms=100,
        **fields,
    )


def metrics(sidecar: Sidecar) -> dict[str, float]:
    """The sidecar's ``kafleet_fetch_*`` samples, by name."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StateCollector(sidecar.view))
    text = generate_latest(registry).decode()
    return {
        line.split("{")[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("kafleet_fetch_")
    }


def test_a_partition_paused_behind_kafleets_back_is_found_and_flows_again_without_a_restart(
    consumer_config: ConfigFactory,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    start_faulty: Start,
    journal: Journal,
    committed_offsets: Offsets,
    end_offsets: Offsets,
    tmp_path: Path,
) -> None:
    topic, state = topic_factory(partitions=2), tmp_path / "state.json"
    config = watched(consumer_config, topic, state)
    produce(topic, 50, partition=0)
    produce(topic, 50, partition=1, start=50)
    consumer, client = start_faulty(config, journal.handler())
    wait_until(lambda: journal.count() == 100, 60, "the first 100 records handled")
    sidecar = Sidecar(state)

    client.stall(topic, 0)
    produce(topic, 200, partition=0, start=100)
    produce(topic, 50, partition=1, start=300)

    found = wait_until(
        lambda: metrics(sidecar).get("kafleet_fetch_stalls_total"), BOUND_S + 3, "a stall"
    )
    assert found == 1
    assert client.stalled_at is not None
    assert time.monotonic() - client.stalled_at < BOUND_S + 3
    wait_until(lambda: journal.count() == 350, 30, "every record handled")
    wait_until(
        lambda: metrics(sidecar).get("kafleet_fetch_stalls_recovered_total") == 1, 5, "recovery"
    )
    figures = metrics(sidecar)
    assert figures["kafleet_fetch_restarts_total"] == 1
    assert figures["kafleet_fetch_stalled_partitions"] == 0
    assert sorted(journal.numbers()) == list(range(350))
    assert max(journal.numbers().values()) == 1  # nothing handled twice
    # The other partition flowed all along: its new records were done before the stall's.
    handled = journal.snapshot()
    first_of_stalled = min(e.ended for e in handled if e.partition == 0 and e.number >= 100)
    assert max(e.ended for e in handled if e.partition == 1) < first_of_stalled
    expected = end_offsets(topic, 2)
    wait_until(
        lambda: committed_offsets(config.group_id, topic, 2) == expected, 10, "all committed"
    )
    assert consumer.error is None


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_partition_whose_fetcher_left_the_client_is_re_assigned_where_kafleet_left_off(
    protocol: str,
    consumer_config: ConfigFactory,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    start_faulty: Start,
    journal: Journal,
    committed_offsets: Offsets,
    end_offsets: Offsets,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic, state = topic_factory(partitions=2), tmp_path / "state.json"
    config = watched(consumer_config, topic, state, group_protocol=protocol)
    produce(topic, 30, partition=0)
    produce(topic, 30, partition=1, start=30)
    consumer, client = start_faulty(config, journal.handler())
    wait_until(lambda: journal.count() == 60, 60, "the first 60 records handled")
    sidecar = Sidecar(state)

    client.stall(topic, 0, unassign=True)
    produce(topic, 100, partition=0, start=60)
    produce(topic, 20, partition=1, start=160)

    wait_until(lambda: journal.count() == 180, BOUND_S + 15, "every record handled")
    assert sorted(journal.numbers()) == list(range(180))  # none lost, none twice
    # Its fetcher was stopped (no seek can move it): re-assigned at once, where kafleet was.
    assert f"{topic}[0]: fetch restarted by reassign at offset 30" in caplog.text
    assert "fetch restarted by seek" not in caplog.text
    wait_until(
        lambda: metrics(sidecar).get("kafleet_fetch_stalls_recovered_total") == 1, 5, "recovery"
    )
    figures = metrics(sidecar)
    assert (figures["kafleet_fetch_stalls_total"], figures["kafleet_fetch_restarts_total"]) == (
        1,
        1,
    )
    expected = end_offsets(topic, 2)
    wait_until(
        lambda: committed_offsets(config.group_id, topic, 2) == expected, 10, "all committed"
    )
    assert consumer.error is None


def test_a_stall_that_survives_its_restarts_turns_readyz_then_healthz_red_naming_the_partition(
    consumer_config: ConfigFactory,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    start_faulty: Start,
    journal: Journal,
    committed_offsets: Offsets,
    end_offsets: Offsets,
    tmp_path: Path,
) -> None:
    topic, state = topic_factory(partitions=2), tmp_path / "state.json"
    config = watched(consumer_config, topic, state)
    produce(topic, 20, partition=0)
    consumer, client = start_faulty(config, journal.handler())
    wait_until(lambda: journal.count() == 20, 60, "the first records handled")
    sidecar = Sidecar(state)
    name = f"{topic}[0]"

    client.stall(topic, 0, sticky=True)
    produce(topic, 80, partition=0, start=20)

    wait_until(lambda: not sidecar.readiness(sidecar.state()).ok, BOUND_S + 3, "/readyz red")
    [reason] = sidecar.readiness(sidecar.state()).reasons
    assert reason.startswith(f"{name} fetches nothing: 80 records behind its log end")
    assert f"fetch_stall_timeout_ms {BOUND_MS}" in reason
    assert sidecar.liveness(sidecar.state()).ok  # restarting its fetch may still help
    figures = metrics(sidecar)
    assert figures["kafleet_fetch_stalled_partitions"] == 1
    assert figures["kafleet_fetch_stalls_total"] == 1

    wait_until(lambda: not sidecar.liveness(sidecar.state()).ok, 4 * BOUND_S + 3, "/healthz red")
    body = sidecar.liveness(sidecar.state()).body()
    assert f"- {name} fetches nothing: 80 records behind its log end" in body
    assert "although its fetch was restarted" in body
    assert "times: a restart of the worker is the cure left (librdkafka#5586)" in body
    assert journal.count() == 20

    client.release()  # the next restart of its fetch works

    wait_until(lambda: journal.count() == 100, BOUND_S + 10, "every record handled")
    wait_until(lambda: sidecar.readiness(sidecar.state()).ok, 5, "/readyz green again")
    assert sidecar.liveness(sidecar.state()).ok
    figures = metrics(sidecar)
    assert figures["kafleet_fetch_stalled_partitions"] == 0
    assert figures["kafleet_fetch_stalls_recovered_total"] == 1
    assert figures["kafleet_fetch_restarts_total"] >= 4
    assert sorted(journal.numbers()) == list(range(100))
    end = end_offsets(topic, 1)[0]
    wait_until(
        lambda: committed_offsets(config.group_id, topic, 1)[0] == end == 100, 10, "all committed"
    )
    assert consumer.error is None


def test_back_pressure_an_idle_partition_and_a_transaction_marker_are_never_a_stall(
    kafka: str,
    consumer_config: ConfigFactory,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    start_faulty: Start,
    journal: Journal,
    tmp_path: Path,
) -> None:
    topic, state = topic_factory(partitions=3), tmp_path / "state.json"
    # Partition 0 is slow and its queue small: paused and resumed all along. Partition 1 stays
    # empty. Partition 2's log ends in a transaction's commit marker, one past its last record.
    config = watched(consumer_config, topic, state, queue={"max_records": 20})
    produce(topic, 200, partition=0)
    producer = Producer({"bootstrap.servers": kafka, "transactional.id": f"tx-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for number in range(200, 220):
        producer.produce(topic, value=record_value(number, 100), partition=2)
    producer.commit_transaction(30)

    consumer, _ = start_faulty(
        config, journal.handler(delay=lambda r: 0.02 if r.partition == 0 else 0.0)
    )
    wait_until(lambda: journal.count() == 220, 60, "every record handled")
    time.sleep(2.5 * BOUND_S)  # idle for longer than the bound, twice over

    snapshot = consumer.snapshot()
    assert snapshot["pauses"] > 0  # back-pressure did pause partition 0
    marked = snapshot["partitions"][f"{topic}[2]"]
    assert (marked["position"], marked["log_end"]) == (20, 21)  # the marker: one past the records
    assert (snapshot["fetch_stalls"], snapshot["fetch_restarts"]) == (0, 0)
    assert snapshot["stalled_partitions"] == {}
    assert Sidecar(state).readiness(Sidecar(state).state()).ok
