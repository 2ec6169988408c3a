"""The operator reads every group of a cluster in one snapshot, from a process of its own: the
committed and log-end offsets of many groups at once, over SASL with the groups' credentials;
a wrong password says authentication failed at once; a reading process that dies costs one
read, and the next one starts afresh."""

from __future__ import annotations

import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import cast

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from kafleet.config.security import Security
from kafleet_operator.reading import (
    clusters,
    committed,
    lag_reader,
    log_offsets,
    readers,
    snapshots,
)
from tests.conftest import TopicFactory
from tests.infra.kafka import SaslListener
from tests.infra.records import ProduceReport


def scram(listener: SaslListener, password: str | None = None) -> Security:
    return Security(
        protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username=listener.username,
        sasl_password=listener.password if password is None else password,
    )


def commit(properties: dict[str, str], group: str, topic: str, offsets: dict[int, int]) -> None:
    committer = Consumer({**properties, "group.id": group})
    try:
        committer.commit(
            offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False
        )
    finally:
        committer.close()


def reader(bootstrap: str, security: Security) -> readers.Reader:
    return readers.Reader(snapshots.Target(bootstrap, security, snapshots.Want("")))


def test_lag_is_read_over_sasl_with_the_groups_credentials(
    kafka_sasl: SaslListener,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    group_id: Callable[[], str],
) -> None:
    topic, group = topic_factory(partitions=2), group_id()
    produce(topic, 30, partition=0)
    produce(topic, 20, partition=1)
    commit(kafka_sasl.properties(), group, topic, {0: 25})
    want = snapshots.Want(group, (topic,))

    child = reader(kafka_sasl.bootstrap, scram(kafka_sasl))
    try:
        snapshot = child.read([want])
    finally:
        child.close()

    assert isinstance(snapshot, snapshots.Snapshot)
    reading = lag_reader.lag_of(snapshot, want)
    assert reading.committed == {(topic, 0): 25, (topic, 1): None}
    assert reading.ends == {(topic, 0): 30, (topic, 1): 20}
    assert reading.lag == {(topic, 0): 5, (topic, 1): 20}  # no commit: read from the earliest


def test_one_read_serves_every_group_of_the_cluster(
    kafka: str,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    group_id: Callable[[], str],
) -> None:
    topics = [topic_factory(partitions=4) for _ in range(3)]
    wants = []
    for n, topic in enumerate(topics):
        produce(topic, 40)
        group = group_id()
        commit({"bootstrap.servers": kafka}, group, topic, dict.fromkeys(range(4), n))
        wants.append(snapshots.Want(group, (topic,)))
    view = clusters.View(kafka, Security())

    snapshot = view.read(wants)

    for n, want in enumerate(wants):
        reading = lag_reader.lag_of(snapshot, want)
        assert reading.partitions == 4
        assert reading.total == 40 - 4 * n
    assert snapshot.starts == {}  # every group committed: no log-start offsets asked


def test_a_caught_up_group_is_not_asked_again_until_its_log_ends_move(
    kafka: str,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    group_id: Callable[[], str],
) -> None:
    """Issue 22: a thousand groups at rest asked Kafka for their committed offsets every pass,
    three times KEDA's requests, though nothing could have changed."""
    topic, group = topic_factory(partitions=2), group_id()
    produce(topic, 20, partition=0)
    commit({"bootstrap.servers": kafka}, group, topic, {0: 20, 1: 0})
    want = snapshots.Want(group, (topic,))
    view = clusters.View(kafka, Security())

    first = lag_reader.lag_of(view.read([want]), want)
    again = lag_reader.lag_of(view.read([want]), want)
    asked_at_rest = view.committed.calls
    produce(topic, 5, partition=1)
    moved = lag_reader.lag_of(view.read([want]), want)

    assert (first.total, again.total, moved.total) == (0, 0, 5)
    assert again.committed == {(topic, 0): 20, (topic, 1): 0}
    assert asked_at_rest == 1
    assert view.committed.calls == 2


def test_a_wrong_password_is_an_authentication_error_before_the_timeout(
    kafka_sasl: SaslListener, topic_factory: TopicFactory, group_id: Callable[[], str]
) -> None:
    topic = topic_factory(partitions=1)
    child = reader(kafka_sasl.bootstrap, scram(kafka_sasl, "wrong"))
    started = time.monotonic()
    try:
        found = child.read([snapshots.Want(group_id(), (topic,))])
    finally:
        child.close()

    assert isinstance(found, KafkaException)
    error = found.args[0]
    assert error.code() == KafkaError._AUTHENTICATION
    assert "invalid credentials" in error.str()
    assert "wrong" not in str(found)  # the password is never in the message
    assert lag_reader.is_authentication_failure(found)
    assert time.monotonic() - started < lag_reader.TIMEOUT_S  # not a hang until the timeout


def test_a_reading_process_that_dies_is_replaced_and_the_read_asked_again_at_once(
    kafka: str, topic_factory: TopicFactory, group_id: Callable[[], str]
) -> None:
    """librdkafka#5040: an admin client's OffsetFetch that answers NOT_COORDINATOR crashes the
    process. The operator's own process must not be the one, and the pass is not lost."""
    want = snapshots.Want(group_id(), (topic_factory(partitions=1),))
    child = reader(kafka, Security())
    try:
        assert isinstance(child.read([want]), snapshots.Snapshot)
        first = child.process
        first.kill()  # as a segfault would
        first.join(5)

        again = child.read([want])
    finally:
        child.close()

    assert isinstance(again, snapshots.Snapshot)
    assert child.process is None or child.process is not first


def test_a_client_that_cannot_be_made_says_why_at_each_read() -> None:
    """Review of issue 22: an SSL file missing in the operator's pod read as "its process
    stopped (exit 1)", a new process every pass."""
    security = Security(protocol="SSL", ssl_ca_location="/nonexistent/ca.pem")
    child = reader("127.0.0.1:9", security)
    try:
        found = [child.read([snapshots.Want("g", ("t",))]) for _ in range(2)]
        process = child.process
    finally:
        child.close()

    for failed in found:
        assert isinstance(failed, KafkaException)
        assert "/nonexistent/ca.pem" in lag_reader.describe(failed)
    assert process is not None  # the same child answered both


def test_groups_without_partitions_or_sharing_them_do_not_fail_the_others(
    kafka: str,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    group_id: Callable[[], str],
) -> None:
    """Review of issue 22: a group naming a topic that does not exist asked librdkafka for
    the offsets of no partition, and two ConsumerGroups of one Kafka group asked for the same
    partitions twice: librdkafka refuses both, and every group of the cluster failed."""
    topic, group, lonely = topic_factory(partitions=2), group_id(), group_id()
    produce(topic, 10)
    commit({"bootstrap.servers": kafka}, group, topic, {0: 1, 1: 1})
    wants = [
        snapshots.Want(group, (topic,)),
        snapshots.Want(group, (topic,)),  # a second ConsumerGroup of the same Kafka group
        snapshots.Want(lonely, ("no-such-topic-yet",)),
    ]

    snapshot = clusters.View(kafka, Security()).read(wants)

    assert lag_reader.lag_of(snapshot, wants[0]).total == 8
    assert lag_reader.lag_of(snapshot, wants[2]).missing_topics == ["no-such-topic-yet"]


def test_a_caught_up_group_with_a_partition_whose_end_is_unknown_is_asked() -> None:
    """Review of issue 22: a caught-up group that gained a partition whose log end could not
    be read counted as settled, and a KeyError failed the cluster's read."""
    view = clusters.View("127.0.0.1:9", Security())
    view._caught_up["g"] = (time.monotonic(), {("t", 0): 5})
    snapshot = snapshots.Snapshot()

    asked = view._settled({"g": [("t", 0), ("t", 1)]}, {("t", 0): 5}, snapshot, set())

    assert asked == {"g": [("t", 0), ("t", 1)]}
    assert "g" not in snapshot.committed


def test_a_group_with_no_worker_running_is_asked_every_pass() -> None:
    """Review of issue 22: offsets are reset on a group with no member (``kafka-consumer-
    groups --reset-offsets`` needs it Empty), moving them back under unchanged log ends."""
    view = clusters.View("127.0.0.1:9", Security())
    view._caught_up["g"] = (time.monotonic(), {("t", 0): 5})

    asked = view._settled({"g": [("t", 0)]}, {("t", 0): 5}, snapshots.Snapshot(), {"g"})

    assert asked == {"g": [("t", 0)]}


def test_a_group_without_commits_reading_from_latest_counts_one_record_per_partition(
    kafka: str,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    group_id: Callable[[], str],
) -> None:
    """Defect 7: with auto_offset_reset latest and no commit, the lag read 0 and a group of
    min_replicas 0 was scaled to zero before any worker committed: KEDA counts 1."""
    topic, group = topic_factory(partitions=2), group_id()
    produce(topic, 10)
    want = snapshots.Want(group, (topic,))
    snapshot = clusters.View(kafka, Security()).read([want])

    counted = lag_reader.lag_of(snapshot, want, reset_earliest=False)
    opted_out = lag_reader.lag_of(snapshot, want, reset_earliest=False, zero_without_commit=True)

    assert counted.lag == {(topic, 0): 1, (topic, 1): 1}
    assert opted_out.lag == {(topic, 0): 0, (topic, 1): 0}


def test_a_partition_whose_offsets_cannot_be_read_is_unknown_not_zero() -> None:
    """Defect 12: an unreadable partition read as low = high = 0 (lag 0, the fleet shrank)."""
    timed_out = snapshots.Failure(KafkaError._TIMED_OUT, "leader not available")
    snapshot = snapshots.Snapshot(
        topics={"orders": (0, 1)},
        ends={("orders", 0): 10},
        unreadable={("orders", 1): timed_out},
        committed={"billing": {("orders", 0): 5, ("orders", 1): 5}},
    )

    with pytest.raises(lag_reader.LagUnreadableError) as caught:
        lag_reader.lag_of(snapshot, snapshots.Want("billing", ("orders",)))

    assert "orders[1]" in str(caught.value)
    assert "leader not available" in str(caught.value)


def test_a_group_whose_committed_offsets_cannot_be_read_raises_kafkas_words() -> None:
    moving = snapshots.Failure(KafkaError.NOT_COORDINATOR, "Broker: Not coordinator")
    snapshot = snapshots.Snapshot(
        topics={"orders": (0,)}, ends={("orders", 0): 10}, committed={"billing": moving}
    )

    with pytest.raises(KafkaException) as caught:
        lag_reader.lag_of(snapshot, snapshots.Want("billing", ("orders",)))

    assert lag_reader.describe(caught.value) == "Broker: Not coordinator"


def test_a_topic_that_does_not_exist_is_named_and_the_others_are_read() -> None:
    snapshot = snapshots.Snapshot(
        topics={"orders": (0,)},
        ends={("orders", 0): 10},
        starts={("orders", 0): 4},
        committed={"billing": {}},
    )

    reading = lag_reader.lag_of(snapshot, snapshots.Want("billing", ("orders", "refunds")))

    assert reading.missing_topics == ["refunds"]
    assert reading.lag == {("orders", 0): 6}  # no commit: from the log start


def test_a_partition_whose_leader_did_not_answer_is_unknown_never_a_smaller_lag() -> None:
    """The issue: a dead leader's partitions were answered -1001 and read as lag 0, the lag as
    677 of 1,000, and the fleet scaled on it."""
    silent = log_offsets.answer(("orders", 1), -1001, 3)
    assert isinstance(silent, snapshots.Failure)
    snapshot = snapshots.Snapshot(
        topics={"orders": (0, 1, 2)},
        ends={("orders", 0): 500, ("orders", 2): 500},
        unreadable={("orders", 1): silent},
        committed={"billing": dict.fromkeys([("orders", 0), ("orders", 1), ("orders", 2)], 0)},
    )

    with pytest.raises(lag_reader.LagUnreadableError) as caught:
        lag_reader.lag_of(snapshot, snapshots.Want("billing", ("orders",)))

    assert caught.value.partition == "orders[1]"
    assert "its leader (broker 3) did not answer" in str(caught.value)


def test_a_log_start_that_cannot_be_read_is_unknown_only_where_the_group_needs_it() -> None:
    silent = snapshots.Failure(log_offsets.NO_ANSWER, "its leader (broker 2) did not answer")
    snapshot = snapshots.Snapshot(
        topics={"orders": (0,)},
        ends={("orders", 0): 10},
        unreadable_starts={("orders", 0): silent},
        committed={"billing": {("orders", 0): 4}, "refunds": {("orders", 0): None}},
    )

    committed = lag_reader.lag_of(snapshot, snapshots.Want("billing", ("orders",)))
    with pytest.raises(lag_reader.LagUnreadableError) as caught:
        lag_reader.lag_of(snapshot, snapshots.Want("refunds", ("orders",)))
    from_latest = lag_reader.lag_of(
        snapshot, snapshots.Want("refunds", ("orders",)), reset_earliest=False
    )

    assert committed.total == 6  # its commit is the base: the log start is not needed
    assert "its leader (broker 2) did not answer" in str(caught.value)
    assert from_latest.total == 1  # auto_offset_reset latest counts no log start either


def test_a_log_start_missing_without_a_cause_is_unknown_too() -> None:
    snapshot = snapshots.Snapshot(
        topics={"orders": (0,)}, ends={("orders", 0): 10}, committed={"refunds": {}}
    )

    with pytest.raises(lag_reader.LagUnreadableError, match="no log-start offset"):
        lag_reader.lag_of(snapshot, snapshots.Want("refunds", ("orders",)))


def answered(partition: int, offset: int, error: KafkaError | None = None) -> TopicPartition:
    """A partition as an OffsetFetch answers it (``TopicPartition.error`` cannot be set)."""
    return cast(
        TopicPartition,
        SimpleNamespace(topic="orders", partition=partition, offset=offset, error=error),
    )


@pytest.mark.parametrize(
    ("answer", "read"),
    [
        ([answered(0, 7), answered(1, 3)], {("orders", 0): 7, ("orders", 1): 3}),
        ([answered(0, 7), answered(1, -1001)], {("orders", 0): 7, ("orders", 1): None}),
        ([answered(0, 0), answered(1, -1)], {("orders", 0): 0, ("orders", 1): None}),
    ],
)
def test_committed_offsets_are_read_as_answered_and_none_where_nothing_was_committed(
    answer: list[TopicPartition], read: dict[tuple[str, int], int | None]
) -> None:
    assert committed.offsets_of([("orders", 0), ("orders", 1)], answer) == read


@pytest.mark.parametrize(
    "answer",
    [
        [answered(0, 7), answered(1, -1001, KafkaError(KafkaError.UNSTABLE_OFFSET_COMMIT))],
        [answered(0, 7)],  # a partition asked and not answered
        [],
        None,
    ],
)
def test_committed_offsets_not_all_answered_are_a_failure_not_a_missing_commit(
    answer: list[TopicPartition] | None,
) -> None:
    """A partition taken as one with no commit reads as 0 with ``scale_to_zero_on_invalid_offset``:
    a smaller lag, where it is an unknown one."""
    assert isinstance(
        committed.offsets_of([("orders", 0), ("orders", 1)], answer), snapshots.Failure
    )
