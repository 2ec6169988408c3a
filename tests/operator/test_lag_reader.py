"""The operator's lag reader on a cluster that authenticates: with the group's SASL/SCRAM
credentials it reads committed and log-end offsets; with a wrong password it says
authentication failed, at once, instead of waiting out its timeout with a transport error."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from kafleet.security import Security
from kafleet_operator import lag_reader
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


def commit(listener: SaslListener, group: str, topic: str, offsets: dict[int, int]) -> None:
    committer = Consumer({**listener.properties(), "group.id": group})
    try:
        committer.commit(
            offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False
        )
    finally:
        committer.close()


def test_lag_is_read_over_sasl_with_the_groups_credentials(
    kafka_sasl: SaslListener,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    group_id: Callable[[], str],
) -> None:
    topic, group = topic_factory(partitions=2), group_id()
    produce(topic, 30, partition=0)
    produce(topic, 20, partition=1)
    commit(kafka_sasl, group, topic, {0: 25})

    reader = lag_reader.LagReader()
    try:
        reading = reader.read(kafka_sasl.bootstrap, group, scram(kafka_sasl), [topic])
    finally:
        reader.close()

    assert reading.committed == {(topic, 0): 25, (topic, 1): None}
    assert reading.ends == {(topic, 0): 30, (topic, 1): 20}
    assert reading.lag == {(topic, 0): 5, (topic, 1): 20}  # no commit: read from the earliest


def test_a_wrong_password_is_an_authentication_error_before_the_timeout(
    kafka_sasl: SaslListener, topic_factory: TopicFactory, group_id: Callable[[], str]
) -> None:
    topic = topic_factory(partitions=1)
    reader = lag_reader.LagReader()
    started = time.monotonic()
    try:
        with pytest.raises(KafkaException) as caught:
            reader.read(kafka_sasl.bootstrap, group_id(), scram(kafka_sasl, "wrong"), [topic])
    finally:
        reader.close()

    error = caught.value.args[0]
    assert error.code() == KafkaError._AUTHENTICATION
    assert "invalid credentials" in error.str()
    assert "wrong" not in str(caught.value)  # the password is never in the message
    assert lag_reader.is_authentication_failure(caught.value)
    assert time.monotonic() - started < lag_reader.TIMEOUT_S  # not a hang until the timeout


def test_the_client_is_kept_while_the_credentials_stay_and_dropped_when_they_are_refused(
    kafka_sasl: SaslListener, topic_factory: TopicFactory, group_id: Callable[[], str]
) -> None:
    topic, group = topic_factory(partitions=1), group_id()
    reader = lag_reader.LagReader()
    try:
        reading = reader.read(kafka_sasl.bootstrap, group, scram(kafka_sasl), [topic])
        first = reader.client
        reader.read(kafka_sasl.bootstrap, group, scram(kafka_sasl), [topic])
        assert reader.client is first

        with pytest.raises(KafkaException):  # a rotated Secret whose password the broker refuses
            reader.read(kafka_sasl.bootstrap, group, scram(kafka_sasl, "rotated"), [topic])
        assert reader.client is None

        reader.read(kafka_sasl.bootstrap, group, scram(kafka_sasl), [topic])
        assert reader.client is not None
        assert reader.client is not first
        assert reading.ends == {(topic, 0): 0}
    finally:
        reader.close()


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
    reader = lag_reader.LagReader()
    try:
        counted = reader.read(kafka, group, Security(), [topic], reset_earliest=False)
        opted_out = reader.read(
            kafka, group, Security(), [topic], reset_earliest=False, zero_without_commit=True
        )
    finally:
        reader.close()

    assert counted.lag == {(topic, 0): 1, (topic, 1): 1}
    assert opted_out.lag == {(topic, 0): 0, (topic, 1): 0}


class OnePartitionUnreadable:
    """The real client, except that one partition's watermarks fail (its leader is down)."""

    def __init__(self, real: lag_reader.LagClient, topic: str) -> None:
        self.real, self.topic, self.watermark_calls = real, topic, 0
        self.consumer = self

    def metadata(self) -> object:
        return self.real.metadata()

    def committed(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        return list(self.real.consumer.committed(tps, timeout=timeout))

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        self.watermark_calls += 1
        if tp.partition >= 1:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "leader not available"))
        return tuple(self.real.consumer.get_watermark_offsets(tp, timeout=timeout))  # type: ignore[return-value]


def test_a_partition_whose_offsets_cannot_be_read_is_unknown_not_zero_and_fails_fast(
    kafka: str,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    group_id: Callable[[], str],
) -> None:
    """Defect 12: an unreadable partition read as low = high = 0 (lag 0, the fleet shrank),
    and each one cost a timeout. Now the reading fails at the first, naming the partition."""
    topic, group = topic_factory(partitions=4), group_id()
    produce(topic, 40)
    real = lag_reader.LagClient(kafka, group, Security())
    flaky = OnePartitionUnreadable(real, topic)
    try:
        with pytest.raises(lag_reader.LagUnreadableError) as caught:
            lag_reader.read_lag(flaky, [topic])  # type: ignore[arg-type]
    finally:
        real.close()

    assert f"{topic}[1]" in str(caught.value)
    assert flaky.watermark_calls == 2  # partition 0, then the first failure: no more
