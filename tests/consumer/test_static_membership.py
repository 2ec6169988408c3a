"""Static membership (``group_instance_id``, KIP-345): a worker that restarts within the
session timeout rejoins with its partitions, and the other members see no rebalance. This is
what the operator relies on when a liveness probe restarts a worker container."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kafleet import ParallelConsumer
from tests.conftest import ConfigFactory, TopicFactory
from tests.infra.records import ProduceReport
from tests.infra.waiting import wait_until

Start = Callable[..., ParallelConsumer]


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_static_member_that_restarts_gets_its_partitions_back_without_a_rebalance(
    protocol: str,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    consumer_config: ConfigFactory,
    start_consumer: Start,
    group_id: Callable[[], str],
) -> None:
    topic = topic_factory(partitions=4)
    produce(topic, 400)
    group = group_id()
    fields = {"group_protocol": protocol}
    if protocol == "classic":
        fields["session_timeout_ms"] = 30_000  # type: ignore[assignment]

    def member(name: str) -> ParallelConsumer:
        config = consumer_config(topic, group=group, group_instance_id=name, **fields)
        return start_consumer(config, lambda record: None)

    first, second = member("worker-0"), member("worker-1")
    wait_until(
        lambda: (
            first.poller.assignment
            and second.poller.assignment
            and len(first.poller.assignment) + len(second.poller.assignment) == 4
        ),
        60,
        "both members to share the 4 partitions",
    )
    kept, moved = first.poller.assignment, second.poller.assignment
    rebalances = first.stats.rebalances

    second.close(grace_s=5)  # a static member leaves no group: its partitions wait for it
    again = member("worker-1")
    wait_until(lambda: again.poller.assignment, 30, "the restarted member's partitions")

    assert again.poller.assignment == moved
    assert first.poller.assignment == kept
    assert first.stats.rebalances == rebalances, "the other member went through a rebalance"
