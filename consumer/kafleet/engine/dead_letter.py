"""The dead-letter topic: where a record goes after its last failed attempt.

Owns: the headers that say why and where from (``dead_letter_headers``, pure), writing the
original key and value with those headers to the dead-letter topic, waiting for the broker's
acknowledgement so that the record's offset is committed only once it is safe there, and
making sure at start that the topic exists (``ensure_topic``): most brokers do not create
topics on first use, so a poison record would otherwise meet a missing topic and stop its
partition. A missing topic is created (``dead_letter_create``) with the partition count
``dead_letter_partitions`` picks (pure), or the start fails with a ``ConfigError`` naming it.
A cluster that does not answer at start does not stop it (the consumer waits for Kafka too):
the check is then made before the first record is parked.

Does not own deciding that a record is dead (``executor.py``) or the policy (``config/model.py``).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Mapping, Sequence

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic  # the class confluent_kafka.admin re-exports

from kafleet.config.model import ConsumerConfig
from kafleet.engine.record import Record
from kafleet.errors import ConfigError, FieldProblem, KafkaClientError

HEADER_PREFIX = "kafleet."
START_CHECK_S = 15.0  # how long the start waits for the cluster to answer the topic check
log = logging.getLogger(__name__)


def producer_config(config: ConsumerConfig) -> dict[str, str | int | float | bool]:
    """The dead-letter writer's client settings: the cluster and its security, nothing else."""
    return {"bootstrap.servers": config.bootstrap_servers, **config.security.properties()}


def dead_letter_headers(
    record: Record, error: BaseException, attempts: int, group_id: str
) -> list[tuple[str, str | bytes | None]]:
    """The record's own headers, then kafleet's: the error, attempts and origin."""
    message = str(error)
    ours = {
        "error.type": f"{type(error).__module__}.{type(error).__qualname__}",
        "error.message": message[:4000],
        "attempts": str(attempts),
        "original.topic": record.topic,
        "original.partition": str(record.partition),
        "original.offset": str(record.offset),
        "original.timestamp": "" if record.timestamp_ms is None else str(record.timestamp_ms),
        "group.id": group_id,
    }
    own: list[tuple[str, str | bytes | None]] = list(record.headers)
    return own + [(HEADER_PREFIX + k, v.encode()) for k, v in ours.items()]


class DeadLetterWriter:
    """A producer shared by every Executor thread; ``send`` blocks until acknowledged."""

    def __init__(
        self,
        producer_config: dict[str, str | int | float | bool],
        topic: str,
        ensure: Callable[[float], object] | None = None,
    ) -> None:
        """``ensure(timeout_s)`` makes sure the topic exists (``ensure_topic``), once."""
        self.topic = topic
        self._ensure = ensure
        self._ensure_lock = threading.Lock()
        self._producer = Producer(
            {**producer_config, "enable.idempotence": True, "acks": "all", "linger.ms": 5}
        )
        self._lock = threading.Lock()

    def check_topic(self, timeout_s: float | None = None) -> None:
        """At start: raise ``ConfigError`` if the topic is missing and may not (or could not)
        be created. A cluster that does not answer (within ``START_CHECK_S``) leaves the check
        to the first send."""
        try:
            self._ensure_once(START_CHECK_S if timeout_s is None else timeout_s)
        except KafkaClientError as exc:
            log.warning(
                "could not check the dead-letter topic %s yet (%s); it is checked again before "
                "the first record is parked",
                self.topic,
                exc,
            )

    def _ensure_once(self, timeout_s: float) -> None:
        with self._ensure_lock:
            if self._ensure is not None:
                self._ensure(timeout_s)
                self._ensure = None

    def send(
        self, record: Record, headers: list[tuple[str, str | bytes | None]], timeout: float = 30.0
    ) -> None:
        """Write the record; raise ``KafkaClientError`` if the broker did not take it (or
        ``ConfigError`` if the topic, not checked at start, is missing for good)."""
        self._ensure_once(timeout)
        outcome: list[KafkaError | None] = []
        done = threading.Event()

        def delivered(err: KafkaError | None, _msg: Message) -> None:
            outcome.append(err)
            done.set()

        with self._lock:
            self._producer.produce(
                self.topic,
                key=record.key,
                value=record.value,
                headers=headers,
                timestamp=record.timestamp_ms or 0,
                on_delivery=delivered,
            )
        waited = 0.0
        while not done.is_set() and waited < timeout:
            with self._lock:
                self._producer.poll(0.05)
            waited += 0.05
        if not outcome:
            raise KafkaClientError(
                KafkaError(KafkaError._MSG_TIMED_OUT, "no acknowledgement"),
                f"dead-lettering {record} to {self.topic}",
            )
        if outcome[0] is not None:
            raise KafkaClientError(outcome[0], f"dead-lettering {record} to {self.topic}")

    def close(self, timeout: float = 10.0) -> None:
        with self._lock:
            self._producer.flush(timeout)


def dead_letter_partitions(
    existing: Mapping[str, int], topics: Sequence[str], pattern: str | None
) -> int:
    """Partitions for a dead-letter topic kafleet creates: the most of any source topic that
    exists (of ``topics``, or of the non-internal topics ``pattern`` matches, anchored at the
    start as the subscription is), so parking keeps up with the widest source; 1 if none."""
    if pattern:
        regex = re.compile(pattern if pattern.startswith("^") else "^" + pattern)
        sources = [name for name in existing if regex.search(name) and not name.startswith("__")]
    else:
        sources = [name for name in topics if name in existing]
    return max((existing[name] for name in sources), default=1)


def ensure_topic(
    client_config: dict[str, str | int | float | bool],
    config: ConsumerConfig,
    timeout_s: float = 30.0,
) -> int | None:
    """Check that the dead-letter topic exists; create it if it does not and
    ``dead_letter_create`` allows. Returns the partitions of a topic it created, else None.

    Raises ``ConfigError`` (``dead_letter_topic``) for a topic that is missing and may not
    or could not be created, ``KafkaClientError`` if the cluster did not answer.
    """
    topic = config.effective_dead_letter_topic
    admin = AdminClient(client_config)
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise KafkaClientError(exc.args[0], f"looking for the dead-letter topic {topic!r}") from exc
    existing = {
        name: len(info.partitions) for name, info in metadata.topics.items() if info.error is None
    }
    if topic in existing:
        return None
    if not config.dead_letter_create:
        raise ConfigError(
            [
                FieldProblem(
                    "dead_letter_topic",
                    f"the topic {topic!r} does not exist (and dead_letter_create is false): "
                    "create it, or let kafleet create it",
                )
            ]
        )
    partitions = dead_letter_partitions(existing, config.topics, config.topic_pattern)
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions)], request_timeout=timeout_s
    )
    try:
        futures[topic].result(timeout=timeout_s)
    except TimeoutError as exc:
        timed_out = KafkaError(KafkaError._TIMED_OUT, "no answer")
        raise KafkaClientError(timed_out, f"creating the dead-letter topic {topic!r}") from exc
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return None  # another worker of the group created it first
        raise ConfigError(
            [
                FieldProblem(
                    "dead_letter_topic",
                    f"the topic {topic!r} does not exist and creating it failed "
                    f"({error.name()}: {error.str()}): create it, or name one that exists",
                )
            ]
        ) from exc
    log.info("created the dead-letter topic %s with %d partition(s)", topic, partitions)
    return partitions
