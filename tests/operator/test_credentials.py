"""A ConsumerGroup's credentials come from the Secrets its spec names: the workers' security
settings with the passwords filled in; a missing Secret, key or value is an error naming the
Secret, the key and the field, never the value; a read Secret is trusted for a while and read
again after it, after the spec changes, or after Kafka refused it; once per TTL by the whole
process however many groups name it, and every group resolves its credentials again only when
a Secret comes back changed, all of them on the same pass."""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping

import pytest

from kafleet_operator.policy.spec import KafkaSecurity, SecretKeyRef
from kafleet_operator.reading.credentials import (
    Credentials,
    CredentialsError,
    SecretData,
    SharedSecrets,
    resolve,
    secret_reader,
)
from tests.conftest import K8s
from tests.infra.clock import Clock

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


def test_a_read_secret_is_trusted_until_the_ttl_then_read_again() -> None:
    secrets, clock = Secrets({"kafka-user": {"password": "one"}}), Clock(1_000)
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
    credentials = Credentials(secrets, ttl_s=60, clock=Clock(1_000))
    credentials.get(SCRAM, NAMESPACE)
    secrets.secrets["kafka-user"]["password"] = "two"

    credentials.forget()  # Kafka refused "one"

    assert credentials.get(SCRAM, NAMESPACE).properties()["sasl.password"] == "two"


def test_a_changed_reference_is_read_at_once() -> None:
    secrets = Secrets({"kafka-user": {"password": "one"}, "other": {"password": "two"}})
    credentials = Credentials(secrets, ttl_s=60, clock=Clock(1_000))
    credentials.get(SCRAM, NAMESPACE)
    moved = SCRAM.model_copy(
        update={"sasl_password_secret": SecretKeyRef(name="other", key="password")}
    )

    assert credentials.get(moved, NAMESPACE).properties()["sasl.password"] == "two"


def test_a_missing_secret_is_not_remembered() -> None:
    secrets = Secrets({})
    credentials = Credentials(secrets, ttl_s=60, clock=Clock(1_000))
    with pytest.raises(CredentialsError):
        credentials.get(SCRAM, NAMESPACE)

    secrets.secrets["kafka-user"] = {"password": "late"}

    assert credentials.get(SCRAM, NAMESPACE).properties()["sasl.password"] == "late"


def test_a_secret_named_by_many_groups_is_read_once_per_ttl_and_again_after_a_refusal() -> None:
    clock = Clock(1_000)
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


PASS_S = 5.0  # the operator's interval


def passes(
    groups: list[Credentials],
    clock: Clock,
    count: int,
    joining: Callable[[], list[Credentials]] = list,
) -> list[set[str]]:
    """``count`` passes of every group (those ``joining`` before each, as a fleet applied over
    a while); each pass's set of passwords in use."""
    seen: list[set[str]] = []
    for _ in range(count):
        groups.extend(joining())
        found = set()
        for group in groups:
            password = group.get(SCRAM, NAMESPACE).sasl_password
            assert password is not None
            found.add(password.get_secret_value())
        seen.append(found)
        clock.now += PASS_S
    return seen


def test_every_group_naming_a_rotated_secret_moves_to_it_on_the_same_pass() -> None:
    """Each group trusted its own resolution for a minute: after a rotation, groups that had
    joined at other passes used the old and the new password side by side for up to a minute
    (two views of one cluster), and a group could use a Secret read two minutes before."""
    clock = Clock(1_000)
    secrets = Secrets({"kafka-user": {"password": "one"}})
    shared = SharedSecrets(secrets, ttl_s=60, clock=clock)
    groups: list[Credentials] = []

    def ten() -> list[Credentials]:
        return [Credentials(shared, ttl_s=60, clock=clock, shared=shared) for _ in range(10)]

    passes(groups, clock, 12, joining=ten)  # 120 groups, joined over a minute
    secrets.secrets["kafka-user"]["password"] = "two"
    rotated_at = clock.now

    seen = passes(groups, clock, 14)

    assert all(len(found) == 1 for found in seen), seen
    moved = next(n for n, found in enumerate(seen) if found == {"two"})
    assert moved * PASS_S <= 60  # within the TTL of the rotation
    assert clock.now - rotated_at == 14 * PASS_S


def test_a_secret_read_again_unchanged_is_not_resolved_again() -> None:
    clock = Clock(1_000)
    secrets = VersionedSecrets({"kafka-user": {"password": "one"}})
    shared = SharedSecrets(secrets, ttl_s=60, clock=clock)
    groups = [Credentials(shared, clock=clock, shared=shared) for _ in range(200)]

    passes(groups, clock, 120)  # ten minutes at rest
    resolved_at_rest = sum(g.resolved for g in groups)
    secrets.rotate("kafka-user", {"password": "two"})
    seen = passes(groups, clock, 12)

    assert secrets.reads == 10 + 1  # once a minute for the 200 groups, then the rotated one
    assert resolved_at_rest == 200  # once each, at the first pass
    assert sum(g.resolved for g in groups) == 400  # once each for the change
    assert seen[-1] == {"two"}


class VersionedSecrets(Secrets):
    """Secrets read with their resourceVersion, as the API gives them."""

    def __init__(self, secrets: dict[str, dict[str, str]]) -> None:
        super().__init__(secrets)
        self.versions = dict.fromkeys(secrets, 1)

    def rotate(self, name: str, data: dict[str, str]) -> None:
        self.secrets[name] = data
        self.versions[name] += 1

    def __call__(self, namespace: str, name: str) -> Mapping[str, str] | None:
        data = super().__call__(namespace, name)
        return None if data is None else SecretData(data, str(self.versions[name]))


def test_a_secret_rewritten_with_the_same_data_changes_nothing_but_its_version() -> None:
    clock = Clock(1_000)
    secrets = VersionedSecrets({"kafka-user": {"password": "one"}})
    shared = SharedSecrets(secrets, ttl_s=60, clock=clock)
    group = Credentials(shared, clock=clock, shared=shared)
    first = group.get(SCRAM, NAMESPACE)

    secrets.rotate("kafka-user", {"password": "one"})  # applied again, say
    clock.now += 61
    again = group.get(SCRAM, NAMESPACE)

    assert again == first
    assert group.resolved == 2


def test_the_api_gives_a_secret_with_its_resource_version_and_a_new_one_when_it_changes(
    k8s: K8s, namespace: str
) -> None:
    read = secret_reader(k8s.api)
    k8s.kubectl("create", "secret", "generic", "kafka-user", "-n", namespace,
                "--from-literal=password=one")  # fmt: skip
    first = read(namespace, "kafka-user")
    k8s.kubectl("patch", "secret", "kafka-user", "-n", namespace, "--type=merge",
                "-p", f'{{"data": {{"password": "{encoded("two")}"}}}}')  # fmt: skip
    second = read(namespace, "kafka-user")

    assert isinstance(first, SecretData)
    assert isinstance(second, SecretData)
    assert first == {"password": encoded("one")}
    assert second == {"password": encoded("two")}
    assert first.version is not None
    assert first.version != second.version
    assert read(namespace, "no-such-secret") is None
