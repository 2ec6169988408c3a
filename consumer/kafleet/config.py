"""The consumer's configuration: one frozen, validated object, loaded once at the edge.

Owns: every setting of a kafleet consumer with its default, unit and bounds; the sources a
``ConsumerConfig`` reads (a YAML file, ``KAFLEET_*`` environment variables nested with ``__``,
as in ``KAFLEET_QUEUE__MAX_RECORDS``, and explicit overrides, the CLI's flags, in that rising
order of precedence); the rules that span fields; rendering the librdkafka properties; masking
secrets whenever the configuration is printed. The field names are the names used by the
config file, the CLI flags (``--max-poll-records``, ``--queue.max-records``; none for secrets)
and the CRD.

Does not own: loading a file and turning every failure into a ``ConfigError`` that names the
field (``config_loading.py``), acting on any setting, or the security settings' rules
(``security.py``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic import field_validator as validates
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from kafleet.security import Security
from kafleet.spark_config import SparkSettings

Ordering = Literal["partition", "key", "unordered"]
Guarantee = Literal["at-most-once", "at-least-once", "exactly-once"]
GroupProtocol = Literal["classic", "consumer"]
OnFailure = Literal["dead-letter", "stop-partition"]
RevokePolicy = Literal["wait", "abandon"]

# librdkafka properties that kafleet sets itself; each maps to the field to use instead.
OWNED_PROPERTIES = {
    "bootstrap.servers": "bootstrap_servers",
    "group.id": "group_id",
    "group.instance.id": "group_instance_id",
    "group.protocol": "group_protocol",
    "enable.auto.commit": "commit_interval_ms (kafleet commits only what is done)",
    "enable.auto.offset.store": "commit_interval_ms (kafleet commits only what is done)",
    "auto.commit.interval.ms": "commit_interval_ms",
    "max.poll.interval.ms": "max_poll_interval_ms",
    "session.timeout.ms": "session_timeout_ms",
    "partition.assignment.strategy": "group_protocol (classic uses cooperative-sticky)",
    "auto.offset.reset": "auto_offset_reset",
    "security.protocol": "security.protocol",
}
SECRET_PROPERTY = re.compile(r"(password|secret|token|private\.key|key\.pem)", re.IGNORECASE)
# module:function, as spark.job takes it; Kafka's legal topic names.
REFERENCE = r"^[\w.]+:\w+$"
TOPIC_NAME = r"^[a-zA-Z0-9._-]{1,249}$"

_Strict = ConfigDict(frozen=True, extra="forbid")


class QueueBounds(BaseModel):
    """How much each assigned partition may hold in its work queue (records not yet started)."""

    model_config = _Strict

    max_records: int = Field(
        5000,
        ge=1,
        le=1_000_000,
        description="records; the partition is "
        "paused when its queue holds this many (the high mark)",
    )
    max_bytes: int = Field(
        8 * 1024 * 1024,
        ge=1024,
        description="bytes of keys and values; also pauses the partition when reached",
    )
    resume_at: float = Field(
        0.5,
        gt=0,
        lt=1,
        description="a paused partition resumes when "
        "its queue falls to this share of both bounds (the low mark)",
    )
    max_seconds: float | None = Field(
        None,
        gt=0,
        le=3600,
        description="seconds of work; the record bound then follows the measured handling rate "
        "(never above max_records), so a partition has this much work buffered, not more",
    )


class RetryPolicy(BaseModel):
    """How a failing record is retried before the failure policy applies."""

    model_config = _Strict

    max_attempts: int = Field(3, ge=1, le=1000, description="attempts in all, the first included")
    initial_backoff_ms: int = Field(100, ge=0, description="wait before the second attempt")
    max_backoff_ms: int = Field(30_000, ge=0, description="the longest wait between attempts")
    multiplier: float = Field(2.0, ge=1.0, le=10.0, description="growth of the wait per attempt")
    jitter: float = Field(0.2, ge=0.0, le=1.0, description="random share added or taken off")

    @model_validator(mode="after")
    def _bounds_ordered(self) -> RetryPolicy:
        if self.max_backoff_ms < self.initial_backoff_ms:
            raise ValueError("max_backoff_ms must not be below initial_backoff_ms")
        return self


# The YAML file the settings sources read, set by ``config_loading.load_config`` for one load.
YAML_FILE: ContextVar[Path | None] = ContextVar("kafleet_config_file", default=None)


class ConsumerConfig(BaseSettings):
    """Everything a kafleet consumer needs; build it with :func:`load_config` or directly."""

    model_config = SettingsConfigDict(
        frozen=True,
        extra="forbid",
        env_prefix="KAFLEET_",
        env_nested_delimiter="__",
        validate_default=True,
    )

    bootstrap_servers: str = Field(min_length=1, description="host:port[,host:port...]")
    group_id: str = Field(min_length=1, max_length=255, description="the consumer group")
    group_instance_id: str | None = Field(
        None,
        min_length=1,
        max_length=255,
        description="static membership (KIP-345): a stable id per member, so a restarted "
        "worker rejoins with its partitions and no rebalance (the operator sets the pod name)",
    )
    topics: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="topics to consume (or topic_pattern)"
    )
    topic_pattern: str | None = Field(None, description="a regular expression of topic names")
    auto_offset_reset: Literal["earliest", "latest"] = Field(
        "earliest", description="where a group with no committed offset starts"
    )
    max_poll_records: int = Field(
        500, ge=1, le=100_000, description="records taken per poll at most (KIP-41); tunable live"
    )
    poll_interval_ms: int = Field(
        50, ge=1, le=1000, description="the Poller's cadence: the longest it waits in one poll"
    )
    max_poll_interval_ms: int = Field(
        300_000,
        ge=1_000,
        le=86_400_000,
        description="librdkafka's limit between polls; kafleet polls every poll_interval_ms "
        "whatever the handlers do",
    )
    session_timeout_ms: int = Field(45_000, ge=1_000, le=3_600_000, description="classic only")
    group_protocol: GroupProtocol = Field(
        "classic", description="classic (cooperative-sticky) or consumer (KIP-848)"
    )
    ordering: Ordering = Field(
        "partition", description="one record at a time per partition, per key, or none"
    )
    concurrency: int = Field(
        16, ge=1, le=10_000, description="handlers running at once; tunable live"
    )
    queue: QueueBounds = Field(default_factory=QueueBounds)
    drain_timeout_s: float = Field(
        10.0,
        gt=0,
        le=3600,
        description="how long a revoked partition's in-flight records may take to finish",
    )
    revoke_policy: RevokePolicy | None = Field(
        None,
        description="on revoke, wait for in-flight records (up to drain_timeout_s and a few "
        "times the recent p99 handler latency) or abandon them and commit what is done at "
        "once; unset: abandon with exactly-once (its idempotent writes absorb a redo), "
        "else wait",
    )
    shutdown_grace_s: float = Field(
        30.0, gt=0, le=3600, description="how long SIGTERM waits for queued and in-flight work"
    )
    processing_timeout_s: float = Field(
        300.0,
        gt=0,
        description="a record in a handler longer than this makes the worker unhealthy (KIP-62)",
    )
    guarantee: Guarantee = Field(
        "at-least-once",
        description="commit after the handler (at-least-once), before it (at-most-once), or "
        "with the sink's output (exactly-once; needs spark, whose Delta writes are idempotent)",
    )
    commit_interval_ms: int = Field(
        1000, ge=10, le=600_000, description="how often done offsets are committed"
    )
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    on_failure: OnFailure = Field(
        "dead-letter",
        description="after the last attempt: send to the dead-letter topic, or stop the partition",
    )
    dead_letter_topic: str | None = Field(
        None, pattern=TOPIC_NAME, description="defaults to <group_id>.dlq"
    )
    dead_letter_create: bool = Field(
        True,
        description="at start, create a missing dead-letter topic with the broker's default "
        "replication and the partition count of the source topic (the most of those in topics, "
        "or of the topics topic_pattern matches then; 1 if none exists yet); false: a missing "
        "one stops the worker at start, naming it",
    )
    kafka: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="more librdkafka consumer properties, passed through"
    )
    security: Security = Field(default_factory=Security)
    handler: str | None = Field(
        None, pattern=REFERENCE, description="module:function, for `kafleet worker`"
    )
    state_file: str | None = Field(
        None,
        description="where the worker publishes its state for the sidecar (a file on a volume "
        "both containers mount)",
    )
    state_interval_ms: int = Field(
        500, ge=50, le=60_000, description="how often the state file is rewritten"
    )
    statistics_interval_ms: int = Field(
        1000,
        ge=0,
        le=600_000,
        description="librdkafka statistics (log-end offsets for lag); 0 turns them off",
    )
    spark: SparkSettings | None = Field(
        None, description="ship handler results in batches to a Spark job (unset: no sink)"
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        path = YAML_FILE.get()
        file_source = [YamlConfigSettingsSource(settings_cls, yaml_file=path)] if path else []
        return (init_settings, env_settings, *file_source)

    @validates("topics", mode="before")
    @classmethod
    def _split_topics(cls, value: object) -> object:
        if isinstance(value, str):  # "a,b" from an environment variable or a flag
            return [t.strip() for t in value.split(",") if t.strip()]
        return value

    @validates("handler", mode="before")
    @classmethod
    def _reference_shaped(cls, value: object) -> object:
        if isinstance(value, str) and not re.fullmatch(REFERENCE, value):  # a clearer message
            raise ValueError(f"expected module:function (the pattern {REFERENCE})")
        return value

    @validates("topic_pattern")
    @classmethod
    def _pattern_compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a regular expression: {exc}") from exc
        return value

    @validates("kafka")
    @classmethod
    def _no_owned_or_secret_properties(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key in value:
            if key in OWNED_PROPERTIES:
                raise ValueError(f"{key!r} is set by kafleet; use {OWNED_PROPERTIES[key]}")
            if SECRET_PROPERTY.search(key):
                raise ValueError(f"{key!r} is a secret; put it in security.* so it is masked")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> ConsumerConfig:
        problems = [f"{field}: {reason}" for field, reason in self._problems()]
        if problems:  # "field: reason" pairs; config_error() turns them into FieldProblems
            raise ValueError("; ".join(problems))
        return self

    def _problems(self) -> Iterator[tuple[str, str]]:
        if bool(self.topics) == bool(self.topic_pattern):
            yield "topics", "give exactly one of topics and topic_pattern"
        if self.group_protocol == "consumer" and "session_timeout_ms" in self.model_fields_set:
            yield (
                "session_timeout_ms",
                ("the broker sets it with group_protocol consumer (KIP-848), so leave it out"),
            )
        if self.drain_timeout_s * 1000 >= self.max_poll_interval_ms / 2:
            yield (
                "drain_timeout_s",
                ("must be under half of max_poll_interval_ms, or a revoke could outlast it"),
            )
        if self.group_protocol == "classic" and self.session_timeout_ms > self.max_poll_interval_ms:
            yield "session_timeout_ms", "must not exceed max_poll_interval_ms"
        explicit = "max_poll_records" in self.model_fields_set  # the default is capped anyway
        if explicit and self.max_poll_records > self.queue.max_records:
            yield "max_poll_records", "must not exceed queue.max_records"
        if self.guarantee == "exactly-once" and self.spark is None:
            yield (
                "guarantee",
                "exactly-once needs spark with spark.table: the Delta table that stores the "
                "offsets with the output",
            )
        if self.guarantee == "exactly-once" and self.spark and self.spark.table is None:
            yield (
                "spark.table",
                "exactly-once needs it, with spark.job too: the worker resumes from that Delta "
                "table's log",
            )
        if self.guarantee == "exactly-once" and self.spark and self.spark.idempotent is False:
            yield "spark.idempotent", "exactly-once needs idempotent writes: leave it unset"
        spark = self.spark
        if self.idempotent_writes and spark and not spark.coordinates and not spark.job:
            yield (
                "spark.coordinates",
                "idempotent writes replace each batch's range of offsets by the "
                "kafka_* columns: keep them",
            )
        dead_letters = self.effective_dead_letter_topic
        if self.on_failure == "dead-letter" and not re.fullmatch(TOPIC_NAME, dead_letters):
            yield (
                "dead_letter_topic",
                f"the default {dead_letters!r} (group_id + '.dlq') is not a valid topic name "
                "(letters, digits, '.', '_', '-'): name one",
            )
        if self.spark is not None and self.spark.batch.max_records > self.queue.max_records:
            yield (
                "spark.batch.max_records",
                f"must not exceed queue.max_records ({self.queue.max_records}): results "
                "waiting for their batch count against the partition's queue",
            )

    @property
    def idempotent_writes(self) -> bool:
        """Whether the Spark sink writes batches idempotently: ``spark.idempotent`` if set,
        else exactly when the guarantee is exactly-once (which needs them)."""
        if self.spark is None:
            return False
        if self.spark.idempotent is not None:
            return self.spark.idempotent
        return self.guarantee == "exactly-once"

    @property
    def effective_revoke_policy(self) -> RevokePolicy:
        if self.revoke_policy is not None:
            return self.revoke_policy
        return "abandon" if self.guarantee == "exactly-once" else "wait"

    @property
    def effective_dead_letter_topic(self) -> str:
        return self.dead_letter_topic or f"{self.group_id}.dlq"

    def librdkafka(self) -> dict[str, str | int | float | bool]:
        """The confluent-kafka ``Consumer`` properties this configuration stands for."""
        props: dict[str, str | int | float | bool] = {
            "bootstrap.servers": self.bootstrap_servers,
            "group.id": self.group_id,
            "group.protocol": self.group_protocol,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": self.auto_offset_reset,
            "max.poll.interval.ms": self.max_poll_interval_ms,
            # kafleet's queues hold the backlog, so librdkafka's prefetch need only cover about
            # one queue per partition (its default, 100,000 messages, is what pause() throws
            # away). And when a prefetch threshold is passed, librdkafka waits
            # fetch.queue.backoff.ms (1 s by default) before fetching that partition again,
            # which after a pause/resume stalls the partition: keep that wait short.
            # Fetch sizes: librdkafka's (64 MB prefetch, 50 MB fetches) were most of a worker's
            # memory in benchmark B4; these halve it at the same rate (B1).
            "queued.min.messages": self.queue.max_records,
            "queued.max.messages.kbytes": 2048,
            "fetch.queue.backoff.ms": 20,
            "fetch.max.bytes": 2 * 1024 * 1024,
            "max.partition.fetch.bytes": 256 * 1024,
            **self.security.properties(),
        }
        if self.group_instance_id:
            props["group.instance.id"] = self.group_instance_id
        if self.statistics_interval_ms:
            props["statistics.interval.ms"] = self.statistics_interval_ms
        if self.group_protocol == "classic":
            props["partition.assignment.strategy"] = "cooperative-sticky"
            props["session.timeout.ms"] = self.session_timeout_ms
        props.update(self.kafka)
        return props

    def masked(self) -> dict[str, Any]:
        """The configuration as plain data with every secret replaced by ``**********``."""
        data: dict[str, Any] = self.model_dump(mode="json")  # SecretStr dumps masked
        return data

    def __str__(self) -> str:
        return yaml.safe_dump(self.masked(), sort_keys=False).rstrip()


TUNABLE_FIELDS = ("max_poll_records", "concurrency")
