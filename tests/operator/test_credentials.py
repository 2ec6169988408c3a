"""A ConsumerGroup's credentials come from the Secrets its spec names: the workers' security
settings with the passwords filled in; a missing Secret, key or value is an error naming the
Secret, the key and the field, never the value; a read Secret is trusted for a while and read
again after it, after the spec changes, or after Kafka refused it."""

from __future__ import annotations

import base64
from collections.abc import Mapping

import pytest

from kafleet_operator.policy.spec import KafkaSecurity, SecretKeyRef
from kafleet_operator.reading.credentials import (
    Credentials,
    CredentialsError,
    SharedSecrets,
    resolve,
)

NAMESPACE = "orders"


def encoded(value: str) -> str:
    return base64.b64encode(value.encode()).decode()


class Secrets:
    """Secrets as the API returns their data (base64), counting the reads."""

    def __init__(self, secrets: dict[str, dict[str, str]]) -> None:
        self.secrets = secrets
        self.reads = 0

    def __call__(self, namespace: str, name: str) -> Mapping[str, str] | None:
        assert namespace == NAMESPACE
        self.reads += 1
        data = self.secrets.get(name)
        return None if data is None else {k: encoded(v) for k, v in data.items()}


SCRAM = KafkaSecurity(
    protocol="SASL_SSL",
    sasl_mechanism="SCRAM-SHA-512",
    sasl_username="billing",
    sasl_password_secret=SecretKeyRef(name="kafka-user", key="password"),
    ssl_ca_location="/etc/kafka/ca.pem",
)


def test_the_password_comes_from_the_secret_and_the_rest_from_the_spec() -> None:
    security = resolve(SCRAM, NAMESPACE, Secrets({"kafka-user": {"password": "s3cret"}}))

    assert security.properties() == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "billing",
        "sasl.password": "s3cret",
        "ssl.ca.location": "/etc/kafka/ca.pem",
    }


def test_the_ssl_key_password_comes_from_its_secret_too() -> None:
    spec = KafkaSecurity(
        protocol="SSL",
        ssl_key_location="/etc/kafka/client.key",
        ssl_key_password_secret=SecretKeyRef(name="client-key", key="pass"),
    )

    security = resolve(spec, NAMESPACE, Secrets({"client-key": {"pass": "k3y"}}))

    assert security.properties()["ssl.key.password"] == "k3y"


def test_plaintext_reads_no_secret() -> None:
    secrets = Secrets({})

    security = resolve(KafkaSecurity(), NAMESPACE, secrets)

    assert security.properties() == {"security.protocol": "PLAINTEXT"}
    assert secrets.reads == 0


@pytest.mark.parametrize(
    ("secrets", "reason", "says"),
    [
        ({}, "SecretNotFound", "the Secret does not exist"),
        ({"kafka-user": {"user": "billing"}}, "SecretKeyNotFound", "the Secret has no such key"),
        ({"kafka-user": {"password": ""}}, "SecretKeyEmpty", "the value is empty"),
    ],
)
def test_a_missing_secret_key_or_value_names_the_secret_key_and_field(
    secrets: dict[str, dict[str, str]], reason: str, says: str
) -> None:
    with pytest.raises(CredentialsError) as caught:
        resolve(SCRAM, NAMESPACE, Secrets(secrets))

    assert caught.value.reason == reason
    assert str(caught.value) == (
        f"Secret orders/kafka-user, key 'password' (spec.security.sasl_password_secret): {says}"
    )


def test_an_error_never_holds_a_value_of_the_secret() -> None:
    data = {"kafka-user": {"password": "s3cret"}}
    spec = SCRAM.model_copy(update={"ssl_key_password_secret": SecretKeyRef(name="x", key="y")})

    with pytest.raises(CredentialsError) as caught:
        resolve(spec, NAMESPACE, Secrets(data))

    assert "s3cret" not in str(caught.value)
    assert "s3cret" not in repr(resolve(SCRAM, NAMESPACE, Secrets(data)))  # masked when printed


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_read_secret_is_trusted_until_the_ttl_then_read_again() -> None:
    secrets, clock = Secrets({"kafka-user": {"password": "one"}}), Clock()
    credentials = Credentials(secrets, ttl_s=60, clock=clock)

    assert credentials.get(SCRAM, NAMESPACE).properties()["sasl.password"] == "one"
    secrets.secrets["kafka-user"]["password"] = "two"  # rotated
    clock.now += 59
    assert credentials.get(SCRAM, NAMESPACE).properties()["sasl.password"] == "one"
    clock.now += 2
    assert credentials.get(SCRAM, NAMESPACE).properties()["sasl.password"] == "two"
    assert secrets.reads == 2


def test_forget_reads_the_secret_again_at_once() -> None:
    secrets = Secrets({"kafka-user": {"password": "one"}})
    credentials = Credentials(secrets, ttl_s=60, clock=Clock())
    credentials.get(SCRAM, NAMESPACE)
    secrets.secrets["kafka-user"]["password"] = "two"

    credentials.forget()  # Kafka refused "one"

    assert credentials.get(SCRAM, NAMESPACE).properties()["sasl.password"] == "two"


def test_a_changed_reference_is_read_at_once() -> None:
    secrets = Secrets({"kafka-user": {"password": "one"}, "other": {"password": "two"}})
    credentials = Credentials(secrets, ttl_s=60, clock=Clock())
    credentials.get(SCRAM, NAMESPACE)
    moved = SCRAM.model_copy(
        update={"sasl_password_secret": SecretKeyRef(name="other", key="password")}
    )

    assert credentials.get(moved, NAMESPACE).properties()["sasl.password"] == "two"


def test_a_missing_secret_is_not_remembered() -> None:
    secrets = Secrets({})
    credentials = Credentials(secrets, ttl_s=60, clock=Clock())
    with pytest.raises(CredentialsError):
        credentials.get(SCRAM, NAMESPACE)

    secrets.secrets["kafka-user"] = {"password": "late"}

    assert credentials.get(SCRAM, NAMESPACE).properties()["sasl.password"] == "late"


def test_a_secret_named_by_many_groups_is_read_once_per_ttl_and_again_after_a_refusal() -> None:
    clock = Clock()
    secrets = Secrets({"kafka-user": {"password": "one"}})
    shared = SharedSecrets(secrets, ttl_s=60, clock=clock)
    groups = [Credentials(shared, ttl_s=60, clock=clock, shared=shared) for _ in range(100)]
    for group in groups:
        password = group.get(SCRAM, NAMESPACE).sasl_password
        assert password is not None
        assert password.get_secret_value() == "one"
    assert secrets.reads == 1
    groups[0].forget()  # Kafka refused it: every group reads it afresh, once
    groups[0].get(SCRAM, NAMESPACE)
    groups[1].forget()
    groups[1].get(SCRAM, NAMESPACE)
    assert secrets.reads == 3
    clock.now += 61
    for group in groups[2:]:
        group.get(SCRAM, NAMESPACE)
    assert secrets.reads == 4
