"""Static membership (``group_instance_id``, KIP-345): a worker that restarts within the
session timeout rejoins with its partitions, and the other members see no rebalance. This is
what the operator relies on when a liveness probe restarts a worker container."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from kafleet import ParallelConsumer
from tests.conftest import ConfigFactory, TopicFactory
from tests.infra.records import ProduceReport
from tests.infra.waiting import wait_until

Start = Callable[..., ParallelConsumer]
QUIET_S = 2.0  # no rebalance callback for this long: the join is over


def _settled(member: ParallelConsumer) -> int:
    """The member's rebalance count once its callbacks have stopped for ``QUIET_S``."""
    last = [member.stats.rebalances, time.monotonic()]

    def quiet() -> bool:
        if member.stats.rebalances != last[0]:
            last[:] = [member.stats.rebalances, time.monotonic()]
        return time.monotonic() - last[1] >= QUIET_S

    wait_until(quiet, 30, "the member's rebalance callbacks to stop", every=0.1)
    return int(last[0])


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
    # The first member's last callback of the join (cooperative: an incremental assign after
    # the second member's) may come a moment after the second member has its partitions: count
    # from when its callbacks have stopped (CI read 3, then the join's last one made it 4).
    rebalances = _settled(first)
    kept, moved = first.poller.assignment, second.poller.assignment

    second.close(grace_s=5)  # a static member leaves no group: its partitions wait for it
    again = member("worker-1")
    wait_until(lambda: again.poller.assignment, 30, "the restarted member's partitions")

    assert again.poller.assignment == moved
    assert first.poller.assignment == kept
    assert first.stats.rebalances == rebalances, "the other member went through a rebalance"
