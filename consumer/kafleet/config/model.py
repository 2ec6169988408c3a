"""The consumer's configuration: one frozen, validated object, loaded once at the edge.

Owns: every setting of a kafleet consumer with its default, unit and bounds; the sources a
``ConsumerConfig`` reads (a YAML file, ``KAFLEET_*`` environment variables nested with ``__``,
as in ``KAFLEET_QUEUE__MAX_RECORDS``, and explicit overrides, the CLI's flags, in that rising
order of precedence); judging every value once, a field's own checks and then the rules that
span fields as one error; the values derived from several settings; masking secrets whenever
the configuration is printed. The field names are the names used by the config file, the CLI
flags (``--max-poll-records``, ``--queue.max-records``; none for secrets) and the CRD.

Does not own: the sections' settings and their own rules (``queue_bounds.py``,
``retry_policy.py``, ``security.py``, ``spark.py``, ``share.py``), the rules that span fields
themselves (``rules.py``), the librdkafka properties it renders and those ``kafka`` may not hold
(``librdkafka.py``), loading a file and turning every failure into a ``ConfigError`` that names
the field (``config/loading.py``), or acting on any setting.
"""

from __future__ import annotations

import re
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, model_validator
from pydantic import field_validator as validates
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from kafleet.config.librdkafka import check_passthrough, consumer_properties
from kafleet.config.queue_bounds import QueueBounds
from kafleet.config.retry_policy import RetryPolicy
from kafleet.config.rules import TOPIC_NAME, config_problems
from kafleet.config.security import Security
from kafleet.config.share import ShareSettings, share_defaults
from kafleet.config.spark import SparkSettings

Ordering = Literal["partition", "key", "unordered"]
Guarantee = Literal["at-most-once", "at-least-once", "exactly-once"]
GroupProtocol = Literal["classic", "consumer"]
GroupType = Literal["consumer", "share"]
OnFailure = Literal["dead-letter", "stop-partition"]
RevokePolicy = Literal["wait", "abandon"]

# module:function, as spark.job takes it.
REFERENCE = r"^[\w.]+:\w+$"

CONCURRENCY_DEFAULT = 16


# The YAML file the settings sources read, set by ``loading.load_config`` for one load.
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
    group_type: GroupType = Field(
        "consumer",
        description="consumer: a consumer group, each partition read by one member; share: a "
        "share group (KIP-932), every member takes records of any partition, each locked "
        "while it is handled (settings in share)",
    )
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
        "partition",
        description="one record at a time per partition, per key, or none (share groups: "
        "unordered, their default)",
    )
    concurrency: int = Field(
        CONCURRENCY_DEFAULT, ge=1, le=10_000, description="handlers running at once; tunable live"
    )
    max_batch_records: int = Field(
        500,
        ge=1,
        le=100_000,
        description="a batch handler's records per call at most (consecutive records of one "
        "partition, or of one key)",
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
    fetch_stall_timeout_ms: int = Field(
        60_000,
        ge=0,
        le=3_600_000,
        description="a partition assigned, not paused by kafleet, behind its log end and given "
        "no record for this long has stopped fetching (librdkafka#5586): /readyz names it and "
        "its fetch is restarted, without restarting the worker; 0 (or statistics_interval_ms "
        "0) turns the watch off",
    )
    spark: SparkSettings | None = Field(
        None, description="ship handler results in batches to a Spark job (unset: no sink)"
    )
    share: ShareSettings = Field(default_factory=ShareSettings)

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

    @model_validator(mode="before")
    @classmethod
    def _share_group_defaults(cls, data: Any) -> Any:
        """A share group's own defaults (``share.share_defaults``)."""
        return share_defaults(data, CONCURRENCY_DEFAULT) if isinstance(data, dict) else data

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
        return check_passthrough(value)

    @model_validator(mode="after")
    def _consistent(self) -> ConsumerConfig:
        problems = [f"{field}: {reason}" for field, reason in config_problems(self)]
        if problems:  # "field: reason" pairs; config_error() turns them into FieldProblems
            raise ValueError("; ".join(problems))
        return self

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
        return consumer_properties(self)

    def masked(self) -> dict[str, Any]:
        """The configuration as plain data with every secret replaced by ``**********``."""
        data: dict[str, Any] = self.model_dump(mode="json")  # SecretStr dumps masked
        return data

    def __str__(self) -> str:
        return yaml.safe_dump(self.masked(), sort_keys=False).rstrip()


TUNABLE_FIELDS = ("max_poll_records", "concurrency")
