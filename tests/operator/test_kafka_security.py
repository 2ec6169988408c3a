"""A ConsumerGroup on a Kafka cluster that authenticates: the operator reads the password from
the Secret the group's ``spec.security`` names and reads the group's lag over SASL/SCRAM, as
its workers connect. A missing Secret is Degraded naming the Secret and key, a password Kafka
refuses is Degraded saying so, and fixing the Secret heals the group without a restart. No
password reaches the status, the Events or the operator's log."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.conftest import K8s, TopicFactory
from tests.infra.kafka import SaslListener
from tests.infra.records import ProduceReport
from tests.infra.waiting import wait_until
from tests.operator.conftest import Operator, apply, condition, consumer_group, get

SECRET = "kafka-user"


def sasl_group(name: str, listener: SaslListener, topic: str, **spec: Any) -> dict[str, Any]:
    """A ConsumerGroup whose workers authenticate with SCRAM, the password in ``SECRET``."""
    return consumer_group(
        name,
        listener.bootstrap,
        topic,
        security={
            "protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": listener.mechanism,
            "sasl_username": listener.username,
            "sasl_password_secret": {"name": SECRET, "key": "password"},
        },
        **spec,
    )


def put_secret(k8s: K8s, namespace: str, password: str) -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SECRET},
        "stringData": {"password": password},
    }
    apply(k8s, namespace, secret)


def degraded(k8s: K8s, namespace: str, name: str) -> dict[str, Any]:
    return condition(get(k8s, namespace, "kcg", name), "Degraded")


def wait_status(
    k8s: K8s, namespace: str, name: str, ok: Callable[[dict[str, Any]], bool], what: str
) -> dict[str, Any]:
    """Wait until the group's status is ``ok``; on a timeout, say what its Degraded says."""
    try:
        wait_until(lambda: ok(get(k8s, namespace, "kcg", name).get("status") or {}), 60, what, 0.5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; Degraded: {degraded(k8s, namespace, name)}") from None
    return degraded(k8s, namespace, name)


def wait_degraded(k8s: K8s, namespace: str, name: str, reason: str) -> dict[str, Any]:
    return wait_status(
        k8s,
        namespace,
        name,
        lambda status: any(
            c["type"] == "Degraded" and c["reason"] == reason
            for c in status.get("conditions") or []
        ),
        f"{name}: Degraded with reason {reason}",
    )


def said_anywhere(k8s: K8s, namespace: str, name: str, op: Operator) -> str:
    """Everything the operator wrote about the group: its status, the Events, its own log."""
    events = k8s.kubectl("get", "events", "-n", namespace, "-o", "json")
    return json.dumps(get(k8s, namespace, "kcg", name)) + events + op.log.read_text()


def test_lag_is_read_over_sasl_with_the_password_from_the_groups_secret(
    k8s: K8s,
    namespace: str,
    kafka_sasl: SaslListener,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    operator: Callable[..., Operator],
) -> None:
    topic = topic_factory(partitions=2)
    produce(topic, 40)
    put_secret(k8s, namespace, kafka_sasl.password)
    op = operator()

    apply(k8s, namespace, sasl_group("secure", kafka_sasl, topic))

    now = wait_status(
        k8s, namespace, "secure", lambda status: status.get("lag") == 40, "lag 40 read over SASL"
    )
    assert now["status"] == "False"
    assert get(k8s, namespace, "kcg", "secure")["status"]["partitions"] == 2
    assert kafka_sasl.password not in said_anywhere(k8s, namespace, "secure", op)


def test_a_missing_secret_then_a_refused_password_are_degraded_until_the_secret_is_fixed(
    k8s: K8s,
    namespace: str,
    kafka_sasl: SaslListener,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    operator: Callable[..., Operator],
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, 7)
    op = operator()
    apply(k8s, namespace, sasl_group("rotated", kafka_sasl, topic))

    missing = wait_degraded(k8s, namespace, "rotated", "SecretNotFound")
    assert missing["status"] == "True"
    assert f"Secret {namespace}/{SECRET}, key 'password'" in missing["message"]

    put_secret(k8s, namespace, "not-the-password")
    refused = wait_degraded(k8s, namespace, "rotated", "KafkaAuthenticationFailed")
    assert "invalid credentials" in refused["message"]

    put_secret(k8s, namespace, kafka_sasl.password)  # the rotation reaches the Secret
    wait_degraded(k8s, namespace, "rotated", "Observed")
    assert get(k8s, namespace, "kcg", "rotated")["status"]["lag"] == 7

    said = said_anywhere(k8s, namespace, "rotated", op)
    assert "not-the-password" not in said
    assert kafka_sasl.password not in said
