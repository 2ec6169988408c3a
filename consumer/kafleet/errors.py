"""kafleet's errors: one root, a few branches, each carrying what it is about.

Owns: the error tree. ``KafleetError`` is the root; ``ConfigError`` names every offending field
and why; ``KafkaClientError`` wraps a confluent-kafka ``KafkaError`` once and keeps its
``retriable`` and ``fatal`` flags; ``OffsetError`` is an invariant broken in the offset
tracker (a bug, never a user error); ``HandlerError`` names the record a handler failed on;
``ResultError`` names the record whose result a sink cannot take, and why; ``SinkError`` is
a sink that cannot start or answer (Spark not reachable, no table, ...).

Does not own: deciding what to do about an error (retry, dead-letter, stop); see
``engine/retry.py`` and ``engine/failure_policy.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from confluent_kafka import KafkaError


class KafleetError(Exception):
    """The root of every error kafleet raises on purpose."""


@dataclass(frozen=True)
class FieldProblem:
    """One field of a configuration and what is wrong with it."""

    field: str
    reason: str

    def __str__(self) -> str:
        return f"{self.field}: {self.reason}"


class ConfigError(KafleetError, ValueError):
    """A configuration was rejected. ``problems`` lists each field and the reason."""

    def __init__(self, problems: Sequence[FieldProblem], source: str = "configuration") -> None:
        self.problems = tuple(problems)
        self.source = source
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"invalid {source}:\n{lines}")

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(p.field for p in self.problems)


class KafkaClientError(KafleetError):
    """An error from the Kafka client, wrapped once; ``kafka_error`` is the original."""

    def __init__(self, kafka_error: KafkaError, context: str = "") -> None:
        self.kafka_error = kafka_error
        self.context = context
        prefix = f"{context}: " if context else ""
        super().__init__(f"{prefix}{kafka_error.name()}: {kafka_error.str()}")

    @property
    def retriable(self) -> bool:
        return bool(self.kafka_error.retriable())

    @property
    def fatal(self) -> bool:
        return bool(self.kafka_error.fatal())


class OffsetError(KafleetError):
    """An offset invariant was broken (for example, a commit would move backwards). A bug."""


class HandlerError(KafleetError):
    """A handler failed on a record after every attempt it was given."""

    def __init__(
        self, topic: str, partition: int, offset: int, attempts: int, cause: BaseException
    ):
        self.topic, self.partition, self.offset = topic, partition, offset
        self.attempts = attempts
        self.cause = cause
        super().__init__(
            f"handler failed on {topic}[{partition}]@{offset} after {attempts} attempt(s): "
            f"{type(cause).__name__}: {cause}"
        )


class ResultError(KafleetError, ValueError):
    """A handler's result cannot become rows of the sink (wrong type, a field the schema does
    not have, a value of the wrong type). ``record`` names the record, ``reason`` says why."""

    def __init__(self, record: object, reason: str) -> None:
        self.record = record
        self.reason = reason
        super().__init__(f"result of {record}: {reason}")


class SinkError(KafleetError):
    """The sink cannot start or answer; ``sink`` names it (a Spark master or remote)."""

    def __init__(self, sink: str, reason: str) -> None:
        self.sink = sink
        self.reason = reason
        super().__init__(f"{sink}: {reason}")
