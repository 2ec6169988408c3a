"""A lag that cannot be read is unknown, and an unknown lag moves no replica, without a cluster:
a pass whose reading lacks a partition (its leader did not answer), a group's committed
offsets, or the whole cluster holds the replicas (neither up on the partitions that could be
read nor down because the lag could not be), says ``Degraded`` with a reason and the partition,
and says ``Observed`` again at the first pass that reads it all; the first readings after it
scale nothing down before a whole window. The same reading from a real cluster whose leader
was SIGKILLed: ``test_lag_on_a_rolling_cluster.py``."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, KafkaException

from kafleet_operator.policy import conditions, scaling
from kafleet_operator.policy.spec import parse_spec
from kafleet_operator.reading import log_offsets, snapshots
from tests.operator.conftest import Passes, consumer_group

TOPIC = "orders"
TPS = [(TOPIC, p) for p in range(6)]
COMMITTED = dict.fromkeys(TPS, 0)
# The group: a lag of 1,000 over 6 partitions that nothing consumes; the broker that
# leads 2 of them SIGKILLed. Read as a sum of what answered, that was 667 here (677 in the
# issue's): 6 replicas.
ENDS = dict(zip(TPS, (167, 167, 167, 167, 166, 166), strict=True))
DEAD_LED = [(TOPIC, 1), (TOPIC, 4)]


def want() -> snapshots.Want:
    return snapshots.Want("billing", (TOPIC,))


def read_all() -> snapshots.Snapshot:
    return snapshots.Snapshot(
        topics={TOPIC: tuple(range(6))}, ends=dict(ENDS), committed={"billing": dict(COMMITTED)}
    )


def dead_leader() -> snapshots.Snapshot:
    """What the operator reads while the leader of two partitions is dead (``log_offsets``:
    their -1001 answers are failures)."""
    unreadable = {}
    for tp in DEAD_LED:
        failure = log_offsets.answer(tp, -1001, 2)
        assert isinstance(failure, snapshots.Failure)
        unreadable[tp] = failure
    ends = {tp: end for tp, end in ENDS.items() if tp not in unreadable}
    return snapshots.Snapshot(
        topics={TOPIC: tuple(range(6))},
        ends=ends,
        unreadable=unreadable,
        committed={"billing": dict(COMMITTED)},
    )


def test_a_partial_reading_would_have_scaled_the_fleet_up() -> None:
    """The issue's figures, for what the tests below keep from happening."""
    policy = parse_spec(
        consumer_group(
            "b", "k:9092", TOPIC, autoscaling={"lag_per_replica": 100, "max_replicas": 10}
        )["spec"]
    ).fleet.autoscaling
    assert policy is not None
    partial = sum(ENDS[tp] for tp in TPS if tp not in DEAD_LED)

    assert partial == 667
    assert scaling.wanted(partial, 6, policy, current=5) == 6


def test_a_dead_leaders_partitions_hold_the_replicas_and_say_degraded_naming_one(
    lag_passes: Callable[..., Passes],
) -> None:
    fleet = lag_passes(want(), 5, {"lag_per_replica": 100, "max_replicas": 10})

    degraded, patch = fleet.observe(dead_leader())

    assert fleet.decisions == [scaling.Decision(5, "LagUnknown", 5)]
    assert degraded["type"] == "Degraded"
    assert degraded["status"] == "True"
    assert degraded["reason"] == "LagUnreadable"
    assert "the offsets of orders[1] cannot be read" in degraded["message"]
    assert "its leader (broker 2) did not answer" in degraded["message"]
    assert degraded["message"].endswith("holding 5 replicas")
    assert "lag" not in patch.status  # no figure is written: the last one stays


@pytest.mark.parametrize(
    ("reading", "reason", "words"),
    [
        (
            snapshots.Snapshot(
                topics={TOPIC: tuple(range(6))},
                ends=dict(ENDS),
                committed={
                    "billing": snapshots.Failure(
                        KafkaError._TIMED_OUT, "no committed offsets in time"
                    )
                },
            ),
            "KafkaUnreachable",
            "no committed offsets in time",
        ),
        (
            KafkaException(
                KafkaError(
                    KafkaError._FAIL,
                    "reading the offsets of kafka:9092 failed: its process stopped (exit -6)",
                )
            ),
            "KafkaUnreachable",
            "its process stopped (exit -6)",
        ),
        (
            snapshots.Snapshot(
                topics={TOPIC: tuple(range(6))},
                ends=dict(ENDS),
                committed={"billing": {**COMMITTED, (TOPIC, 3): None}},
                unreadable_starts={
                    (TOPIC, 3): snapshots.Failure(
                        log_offsets.NO_ANSWER, "its leader did not answer"
                    )
                },
            ),
            "LagUnreadable",
            "orders[3]",
        ),
    ],
    ids=["committed-offsets-not-read", "reading-process-died", "log-start-not-read"],
)
def test_every_reading_that_is_not_whole_holds_the_replicas_and_says_why(
    lag_passes: Callable[..., Passes],
    reading: snapshots.Snapshot | Exception,
    reason: str,
    words: str,
) -> None:
    fleet = lag_passes(want(), 5, {"lag_per_replica": 100, "max_replicas": 10})

    degraded, _ = fleet.observe(reading)

    assert fleet.decisions == [scaling.Decision(5, "LagUnknown", 5)]
    assert (degraded["status"], degraded["reason"]) == ("True", reason)
    assert words in degraded["message"]


def test_an_unknown_lag_scales_nothing_down_and_the_first_readings_after_it_neither(
    lag_passes: Callable[..., Passes],
) -> None:
    """A lag below one replica's share would scale 5 down to 1, after the window; the readings
    that follow an outage start the window again (a restart forgets it likewise)."""
    fleet = lag_passes(
        want(),
        5,
        {"lag_per_replica": 100_000, "max_replicas": 10, "scale_down_stabilization_s": 60},
    )

    fleet.observe(dead_leader())
    fleet.observe(read_all())

    assert [d.replicas for d in fleet.decisions] == [5, 5]
    assert [d.reason for d in fleet.decisions] == ["LagUnknown", "WatchingBeforeScaleDown"]


def test_degraded_lasts_only_while_the_lag_cannot_be_read(
    lag_passes: Callable[..., Passes],
) -> None:
    fleet = lag_passes(want(), 6, {"lag_per_replica": 100, "max_replicas": 10})

    before, _ = fleet.observe(read_all())
    during, _ = fleet.observe(dead_leader())
    after, patch = fleet.observe(read_all())

    assert [c["status"] for c in (before, during, after)] == ["False", "True", "False"]
    assert after["reason"] == "Observed"
    assert after["message"] == "lag read from Kafka"
    assert patch.status["lag"] == 1000  # the whole lag, the partitions that were dead included
    judged = {c["type"]: c for c in conditions.judge(conditions.Facts(1, applied=1, lag=during))}
    assert judged["Degraded"]["reason"] == "LagUnreadable"  # the pass's status says so


def test_the_operator_logs_once_when_lag_becomes_unreadable_and_once_when_it_is_read_again(
    lag_passes: Callable[..., Passes], caplog: pytest.LogCaptureFixture
) -> None:
    fleet = lag_passes(want(), 6, {"lag_per_replica": 100, "max_replicas": 10})
    caplog.set_level(logging.INFO, logger="kafleet.operator")

    fleet.observe(read_all())
    for _ in range(3):
        fleet.observe(dead_leader())
    fleet.observe(read_all())

    said = [r.getMessage() for r in caplog.records if "lag" in r.getMessage()]
    assert len([m for m in said if "cannot read lag (LagUnreadable)" in m]) == 1
    again = [m for m in said if "lag read again" in m]
    assert len(again) == 1
    assert "(1000 after 3 failed reads)" in again[0]
