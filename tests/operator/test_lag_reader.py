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
