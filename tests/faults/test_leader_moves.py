"""Leaders moved on purpose while records flow: a preferred-leader election (what an operator
runs after a roll leaves one broker leading nothing) and a reassignment of partitions (what
adding or draining a broker does). The workers must lose nothing, keep their partitions, and
stall no longer than the move itself takes.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.faults.conftest import FleetFactory
from tests.faults.delivery import SteadyProducer
from tests.faults.test_broker_roll import PARTITIONS, protocol_flags, wait_committed_to_end
from tests.infra.kafka_cluster import KafkaCluster
from tests.infra.waiting import wait_until

SLACK_S = 2.0  # a poll cadence, a fetch wait and a commit interval beyond the move


def replicas_of(cluster: KafkaCluster, topic: str) -> dict[int, list[int]]:
    metadata = cluster.admin().list_topics(topic, timeout=10).topics[topic]
    return {p: list(m.replicas) for p, m in metadata.partitions.items()}


@pytest.mark.timeout(600)  # a fault and its recovery, slower on a busy machine
@pytest.mark.parametrize(
    ("move", "protocol"), [("preferred election", "classic"), ("reassignment", "consumer")]
)
def test_moving_leaders_under_load_loses_nothing_and_stalls_no_longer_than_the_move(
    move: str,
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
    first = replicas_of(cluster, topic)

    with SteadyProducer(cluster.bootstrap, topic, rate=200) as producer:
        if move == "preferred election":
            # A clean bounce of node 1 hands its leaderships to the others, and they keep
            # them when it returns: the skew an election corrects.
            cluster.bounce(1)
            cluster.wait_in_sync()
            led = [p for p in range(PARTITIONS) if first[p][0] == 1]
            assert all(cluster.leader(topic, p) != 1 for p in led)
            time.sleep(3)
            start = time.time()
            cluster.elect_preferred_leaders(topic, PARTITIONS)
            end = time.time()
            assert all(cluster.leader(topic, p) == 1 for p in led)
        else:
            # Every partition's replicas rotated by one: each partition's preferred leader
            # changes, and the reassignment moves leadership to it.
            time.sleep(3)
            start = time.time()
            rotated = {p: r[1:] + r[:1] for p, r in first.items()}
            cluster.reassign(topic, rotated)
            cluster.elect_preferred_leaders(topic, PARTITIONS)
            end = time.time()
            wait_until(
                lambda: all(cluster.leader(topic, p) == rotated[p][0] for p in rotated),
                30,
                "the rotated replicas' first to lead",
            )
        time.sleep(5)
    wait_committed_to_end(cluster.bootstrap, workers.group, topic)
    after = {name: workers.counters(name) for name in workers.running()}
    assert workers.stop_all() == {"a": 0, "b": 0}

    delivery = workers.delivery(producer)
    stall = delivery.longest_stall(start, end + 5)
    print(f"\n{protocol}, {move} in {end - start:.1f} s: {delivery.summary(start, end + 5)}")
    assert not delivery.lost, f"lost {len(delivery.lost)} records, first {delivery.lost[:5]}"
    assert after == before, "a leader's move cost a worker its partitions"
    assert delivery.duplicates == 0
    assert stall <= (end - start) + SLACK_S, f"handling stalled {stall:.1f} s"
