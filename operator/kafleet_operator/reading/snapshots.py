"""One read of a cluster as values: what each group asks, where, and what the read answers.

Owns: what one group asks of its cluster (``Want``: its group id, its topics or pattern, whether
its committed offsets may be taken as settled, whether it is a share group), where it asks it
(``Target``: bootstrap servers and security settings, passwords included; its ``key``, a
digest of them, never them, tells the groups that connect the same way, which share a reader),
what a read answers (``Snapshot``: every topic's partitions, the log-end and log-start offsets
read and why those that could not be read were not, each group's committed offsets or share
states; and the partitions a group watches, ``Snapshot.partitions``), and a Kafka error as a
snapshot carries it (``Failure``). They all pickle: they cross the pipe of the reading process
(``readers.py``).

Does not own reading them (``clusters.py``) or what they mean for a group's lag
(``lag_reader.py``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException

from kafleet.config.security import Security
from kafleet_operator.reading.share_lag import ShareState

TP = tuple[str, int]


@dataclass(frozen=True)
class Failure:
    """A Kafka error as a snapshot carries it (librdkafka's errors do not pickle, and a
    snapshot crosses from the reading process, ``readers.py``)."""

    code: int
    text: str

    @classmethod
    def of(cls, exc: KafkaException) -> Failure:
        error = exc.args[0] if exc.args else None
        if isinstance(error, KafkaError):
            return cls(error.code(), error.str())
        return cls(KafkaError._FAIL, str(exc))

    def exception(self) -> KafkaException:
        return KafkaException(KafkaError(self.code, self.text))


@dataclass(frozen=True)
class Want:
    """What one group asks of its cluster: its group id and its topics (or pattern)."""

    group_id: str
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    # False while no worker runs: an idle group is where offsets are reset (``kafka-consumer-
    # groups --reset-offsets`` needs it Empty), so its committed offsets are asked every pass.
    may_settle: bool = True
    share: bool = False  # a share group (KIP-932): its start offsets and lags, not commits


@dataclass(frozen=True)
class Snapshot:
    """One read of a cluster: the partitions of every topic, offsets of the watched ones."""

    topics: dict[str, tuple[int, ...]] = field(default_factory=dict)
    ends: dict[TP, int] = field(default_factory=dict)
    starts: dict[TP, int] = field(default_factory=dict)
    # The partitions whose log end could not be read (every group there: lag unknown), and
    # those whose log start could not be (a group that has not committed there: unknown).
    unreadable: dict[TP, Failure] = field(default_factory=dict)
    unreadable_starts: dict[TP, Failure] = field(default_factory=dict)
    committed: dict[str, dict[TP, int | None] | Failure] = field(default_factory=dict)
    # Share groups': each partition the broker has a state for (``share_lag.ShareState``).
    share: dict[str, dict[TP, ShareState] | Failure] = field(default_factory=dict)
    at: float = 0.0

    def partitions(self, want: Want) -> tuple[list[TP], list[str]]:
        """The partitions a group watches, and the topics it names that do not exist."""
        if want.topic_pattern:
            pattern = re.compile(want.topic_pattern)
            chosen = [t for t in self.topics if pattern.match(t) and not t.startswith("__")]
            missing: list[str] = []
        else:
            chosen = [t for t in want.topics if t in self.topics]
            missing = [t for t in want.topics if t not in self.topics]
        return [(t, p) for t in sorted(chosen) for p in self.topics[t]], missing


@dataclass(frozen=True)
class Target:
    """Where one group reads its offsets: a connection (``key``, a digest of how it
    connects: groups with the same one share a view) and what it wants there."""

    bootstrap: str
    security: Security
    want: Want

    @property
    def key(self) -> str:
        return _key(self.bootstrap, self.security)


@functools.lru_cache(maxsize=1024)
def _key(bootstrap: str, security: Security) -> str:
    rendered = json.dumps([bootstrap, security.properties()], sort_keys=True)
    return hashlib.sha256(rendered.encode()).hexdigest()
