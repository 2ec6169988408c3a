"""The ``share`` section of the configuration: how a worker takes part in a share group.

A share group (KIP-932) hands the records of any partition to any member, each record locked
to the member that acquired it until it is acknowledged or its lock runs out; KIP-1206's
``record_limit`` makes ``max_poll_records`` a strict bound on what one fetch acquires, so a slow
handler is never given more than it can finish inside the lock. ``group_type: share`` turns it
on; this section says how.

Owns: the settings of share mode with their defaults and bounds (share consumers per worker,
the acquire mode, the group's delivery-count limit, what a dead-lettered record is
acknowledged as, whether the worker sets the group's configs, the Java client's classpath and
JVM options), and rendering the Java client's properties from a ``ConsumerConfig`` (security
included: the Java names of librdkafka's settings). ``ConsumerConfig.share`` holds one; the
CRD's ``spec.share`` is the same model.

Also owns a share group's own defaults and rules (``share_defaults``, ``share_problems``),
which ``ConsumerConfig`` applies and judges, so the CRD, the operator and the worker judge a
share group the same way. Does not own the rest of the configuration (``config/model.py``), the JVM
(``share/jvm.py``) or acting on any setting.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic import field_validator as validates
from pydantic_settings import NoDecode

if TYPE_CHECKING:
    from kafleet.config.model import ConsumerConfig

# share.classpath as a variable (the kafleet-spark image sets it): the operator reads share
# groups' lag with the same Java client, from the same variable.
CLASSPATH_ENV = "KAFLEET_SHARE__CLASSPATH"

_Strict = ConfigDict(frozen=True, extra="forbid")

AcquireMode = Literal["record_limit", "batch_optimized"]
DeadLetterAck = Literal["accept", "reject"]


class ShareSettings(BaseModel):
    """How a worker consumes a share group (``group_type: share``)."""

    model_config = _Strict

    consumers: int = Field(
        1,
        ge=1,
        le=64,
        description="share consumers per worker, each owned by one thread (records from all of "
        "them share the handlers: concurrency)",
    )
    acquire_mode: AcquireMode = Field(
        "record_limit",
        description="record_limit: a fetch acquires max_poll_records records at most (KIP-1206); "
        "batch_optimized: the broker may hand out whole batches beyond it",
    )
    delivery_limit: int = Field(
        5,
        ge=2,
        le=25,
        description="the group's share.delivery.count.limit: a record delivered this many times "
        "is dead-lettered by kafleet on its last delivery, never left for the broker to archive",
    )
    dead_letter_ack: DeadLetterAck = Field(
        "accept",
        description="how a record written to the dead-letter topic is acknowledged: accept "
        "(done) or reject (the broker archives it as unprocessable)",
    )
    configure_group: bool = Field(
        True,
        description="at start, set the group's share.record.lock.duration.ms (from "
        "processing_timeout_s), share.delivery.count.limit and share.auto.offset.reset "
        "(auto_offset_reset) through the admin API",
    )
    classpath: str | None = Field(
        None,
        description="the Java client's jars (kafka-clients and its dependencies), as a "
        "folder/* or a list joined with ':'; `kafleet share-jars DIR` fetches them; the "
        "kafleet-spark image sets it",
    )
    jvm_options: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["-Xmx256m"],
        description="options of the in-process JVM that runs the Java share consumer (a "
        "flag or variable: separated by spaces)",
    )

    @validates("jvm_options", mode="before")
    @classmethod
    def _split_options(cls, value: object) -> object:
        if isinstance(value, str):  # "-Xmx512m -Xss1m" from a flag or an environment variable
            return value.split()
        return value


def lock_ms(config: ConsumerConfig) -> int:
    """The record lock the group gets: ``processing_timeout_s`` (a record may run that long,
    so its lock must last as long; 30 s unless set in a share group, the broker's default)."""
    return max(1000, int(config.processing_timeout_s * 1000 + 0.999))


def java_properties(config: ConsumerConfig, max_poll_records: int) -> dict[str, str]:
    """The Java ``KafkaShareConsumer``'s properties: explicit acknowledgement, the acquire mode,
    the strict record limit, security in Java's names, then ``kafka`` passed through."""
    props = {
        "bootstrap.servers": config.bootstrap_servers,
        "group.id": config.group_id,
        "share.acknowledgement.mode": "explicit",
        "share.acquire.mode": config.share.acquire_mode,
        "max.poll.records": str(max_poll_records),
        "key.deserializer": BYTES,
        "value.deserializer": BYTES,
        "client.id": f"kafleet-{config.group_id}",
        **security_properties(config),
    }
    props.update({k: _java_value(v) for k, v in config.kafka.items()})
    return props


def admin_properties(config: ConsumerConfig) -> dict[str, str]:
    return {"bootstrap.servers": config.bootstrap_servers, **security_properties(config)}


BYTES = "org.apache.kafka.common.serialization.ByteArrayDeserializer"


def security_properties(config: ConsumerConfig) -> dict[str, str]:
    """``security`` in the Java client's names: PEM files as PEM trust and key stores (KIP-651),
    SASL through a JAAS line."""
    sec = config.security
    props: dict[str, str] = {"security.protocol": sec.protocol}
    if sec.ssl_ca_location:
        props["ssl.truststore.type"] = "PEM"
        props["ssl.truststore.location"] = sec.ssl_ca_location
    if sec.ssl_certificate_location and sec.ssl_key_location:
        props["ssl.keystore.type"] = "PEM"
        props["ssl.keystore.certificate.chain"] = _read(sec.ssl_certificate_location)
        props["ssl.keystore.key"] = _read(sec.ssl_key_location)
        if sec.ssl_key_password is not None:
            props["ssl.key.password"] = sec.ssl_key_password.get_secret_value()
    if sec.sasl_mechanism is not None:
        props["sasl.mechanism"] = sec.sasl_mechanism
    if sec.sasl_mechanism and sec.sasl_username and sec.sasl_password is not None:
        module = (
            "org.apache.kafka.common.security.plain.PlainLoginModule"
            if sec.sasl_mechanism == "PLAIN"
            else "org.apache.kafka.common.security.scram.ScramLoginModule"
        )
        user = _quoted(sec.sasl_username)
        password = _quoted(sec.sasl_password.get_secret_value())
        props["sasl.jaas.config"] = f"{module} required username={user} password={password};"
    return props


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as pem:
        return pem.read()


def _java_value(value: str | int | float | bool) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


SHARE_PROCESSING_TIMEOUT_S = 30.0


def share_defaults(data: dict[str, Any], concurrency_default: int) -> dict[str, Any]:
    """Defaults that differ in a share group: unordered; a 30 s processing timeout (the
    record lock it becomes, which a broker bounds to 15-60 s unless told otherwise);
    polls of as many records as the handlers can take at once."""
    if data.get("group_type") == "share":
        data.setdefault("ordering", "unordered")
        data.setdefault("processing_timeout_s", SHARE_PROCESSING_TIMEOUT_S)
        if "max_poll_records" not in data:
            share = data.get("share") or {}
            consumers = share.get("consumers", 1) if isinstance(share, dict) else share.consumers
            concurrency = data.get("concurrency", concurrency_default)
            with contextlib.suppress(TypeError, ValueError, ZeroDivisionError):
                data["max_poll_records"] = max(1, int(concurrency) // int(consumers))
    return data


def share_problems(config: ConsumerConfig) -> Iterator[tuple[str, str]]:
    """The rules of a share group, as (field, reason) pairs; ``ConsumerConfig`` judges them."""
    if config.ordering != "unordered":
        yield (
            "ordering",
            f"{config.ordering} ordering cannot hold in a share group: its members take "
            "records of one partition side by side: use unordered (the default there)",
        )
    if config.guarantee == "exactly-once":
        yield (
            "guarantee",
            "exactly-once cannot hold in a share group: many members share a partition, so "
            "no one member's output can store its offsets: use at-least-once",
        )
    if config.spark is not None and config.spark.idempotent:
        yield (
            "spark.idempotent",
            "idempotent writes replace a range of a partition's offsets, and in a share "
            "group other members write inside that range: leave it unset",
        )
    if config.topic_pattern:
        yield "topic_pattern", "share groups subscribe to named topics: use topics"
    if config.group_instance_id:
        yield "group_instance_id", "share groups have no static membership: leave it out"
    if config.on_failure != "dead-letter":
        yield (
            "on_failure",
            "a share group has no partition to stop: a record that fails for good goes to "
            "the dead-letter topic (share.dead_letter_ack says how it is acknowledged)",
        )
    acquired = config.share.consumers * config.max_poll_records
    if acquired > config.concurrency:
        yield (
            "max_poll_records",
            f"share.consumers x max_poll_records ({acquired}) must not exceed concurrency "
            f"({config.concurrency}): records acquired beyond the handlers wait while their "
            "locks run (the default is concurrency / share.consumers)",
        )
    if config.processing_timeout_s > 3600:
        yield (
            "processing_timeout_s",
            "a share group's record lock lasts at most an hour (the broker's bound), and "
            "a record is handled within its lock",
        )
