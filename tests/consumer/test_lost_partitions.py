"""A worker whose partitions are lost (its session expired: cut off from the coordinator) is out
of its group until it is assigned again, and says so: readiness fails, naming why. The worker on
a real node cut from its brokers: ``tests/e2e/test_network_cut.py``."""

from __future__ import annotations

import json
from types import SimpleNamespace
from unittest.mock import MagicMock

from confluent_kafka import TopicPartition

from kafleet.engine.poller import Poller
from kafleet.engine.rebalance import Rebalance
from kafleet.engine.statistics import read_statistics
from kafleet.health import assessment


def _poller() -> MagicMock:
    poller = MagicMock()
    poller.joined, poller.closing, poller.shipper = True, False, None
    poller.assigned = {("orders", 0), ("orders", 1)}
    return poller


def test_a_worker_whose_partitions_are_lost_is_out_of_its_group_until_assigned_again() -> None:
    poller, consumer = _poller(), MagicMock()
    rebalance = Rebalance(poller, lambda: None)

    rebalance.on_lost(consumer, [TopicPartition("orders", 0), TopicPartition("orders", 1)])
    assert poller.joined is False
    assert poller.assigned == set()

    rebalance.on_assign(consumer, [])  # librdkafka's answer once it is back in the group
    assert poller.joined is True


def test_a_worker_out_of_its_group_is_not_ready_and_says_why() -> None:
    state = {"written_at": 100.0, "joined": False, "partitions": {}}

    verdict = assessment.readiness(state, now=100.5)

    assert not verdict.ok
    assert any("not in its group" in reason for reason in verdict.reasons)


def _stats(state: str, join_state: str) -> str:
    return json.dumps({"cgrp": {"state": state, "join_state": join_state}, "topics": {}})


def test_librdkafkas_statistics_say_whether_the_member_is_steady_in_its_group() -> None:
    assert read_statistics(_stats("up", "steady"), [], True)[2]
    assert not read_statistics(_stats("up", "wait-join"), [], True)[2]
    assert not read_statistics(_stats("query-coord", "init"), [], True)[2]
    assert not read_statistics("not json", [], True)[2]


def test_a_member_steady_again_with_no_partition_is_back_in_its_group() -> None:
    """KIP-848 calls no ``on_assign`` when a rejoin brings the same (empty) assignment
    (``rd_kafka_cgrp_consumer_reset``, then "Assignment is the same"): the statistics tell."""
    watch = MagicMock()
    watch.statistics.return_value = {}
    poller = SimpleNamespace(fetch_watch=watch, assigned=set(), joined=False, closing=False)

    watch.group_steady = False
    Poller._on_statistics(poller, "{}")  # type: ignore[arg-type]
    assert poller.joined is False
    watch.group_steady = True
    Poller._on_statistics(poller, "{}")  # type: ignore[arg-type]
    assert poller.joined is True
