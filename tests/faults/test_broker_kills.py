"""A broker SIGKILLed for 20 s while records flow: first the one that coordinates the group,
then one that leads some of its partitions and coordinates nothing of it. Kafka moves the
coordinator and the leaders once the controller fences the dead broker
(``broker.session.timeout.ms``, 9 s); the workers must lose nothing, and with the recommended
settings keep their partitions through it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.faults.conftest import FleetFactory
from tests.faults.delivery import SteadyProducer
from tests.faults.test_broker_roll import PARTITIONS, protocol_flags, wait_committed_to_end
from tests.infra.kafka_cluster import KafkaCluster

DOWN_S = 20


def victim(cluster: KafkaCluster, role: str, group: str, topic: str) -> int:
    """The node to kill: the group's coordinator, or a leader of the topic that is not it."""
    coordinator = cluster.coordinator(group)
    if role == "coordinator":
        return coordinator
    leaders = {cluster.leader(topic, p) for p in range(PARTITIONS)} - {coordinator}
    assert leaders, "every partition is led by the coordinator; spread leaders first"
    return min(leaders)


@pytest.mark.timeout(600)  # a fault and its recovery, slower on a busy machine
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
@pytest.mark.parametrize("role", ["coordinator", "leader"])
def test_a_broker_killed_for_20_s_loses_nothing_and_revokes_nothing(
    role: str,
    protocol: str,
    cluster_intact: KafkaCluster,
    cluster_topic: Callable[[int], str],
    fleet: FleetFactory,
) -> None:
    cluster = cluster_intact
    topic = cluster_topic(PARTITIONS)
    workers = fleet(topic)
    for name in ("a", "b"):
        workers.start(name, *protocol_flags(protocol))
    workers.wait_assigned(PARTITIONS)
    before = {name: workers.counters(name) for name in workers.running()}
    node = victim(cluster, role, workers.group, topic)

    with SteadyProducer(cluster.bootstrap, topic, rate=200) as producer:
        time.sleep(2)
        steady_start = time.time()
        time.sleep(8)
        killed = time.time()
        cluster.kill(node)
        time.sleep(DOWN_S)
        cluster.revive(node)
        back = time.time()
        cluster.wait_in_sync()
        time.sleep(5)
    wait_committed_to_end(cluster.bootstrap, workers.group, topic)
    after = {name: workers.counters(name) for name in workers.running()}
    assert workers.stop_all() == {"a": 0, "b": 0}

    delivery = workers.delivery(producer)
    print(
        f"\n{protocol}, {role} (node {node}) killed for {back - killed:.0f} s: "
        f"{delivery.summary(killed, back + 5)}; steady "
        f"{delivery.rate(steady_start, killed):.0f}/s; counters {before} -> {after}"
    )
    assert not delivery.lost, f"lost {len(delivery.lost)} records, first {delivery.lost[:5]}"
    assert after == before, "a broker's death cost a worker its partitions"
    assert delivery.duplicates == 0, "a record was handled twice with no worker moving"
