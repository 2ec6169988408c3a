"""The dead-letter topic: where a record goes after its last failed attempt.

Owns: the headers that say why and where from (``dead_letter_headers``, pure), and writing the
original key and value with those headers to the dead-letter topic, waiting for the broker's
acknowledgement so that the record's offset is committed only once it is safe there.

Does not own deciding that a record is dead (``executor.py``) or the policy (``config.py``).
"""

from __future__ import annotations

import threading

from confluent_kafka import KafkaError, Message, Producer

from kafleet.errors import KafkaClientError
from kafleet.record import Record

HEADER_PREFIX = "kafleet."


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

    def __init__(self, producer_config: dict[str, str | int | float | bool], topic: str) -> None:
        self.topic = topic
        self._producer = Producer(
            {**producer_config, "enable.idempotence": True, "acks": "all", "linger.ms": 5}
        )
        self._lock = threading.Lock()

    def send(
        self, record: Record, headers: list[tuple[str, str | bytes | None]], timeout: float = 30.0
    ) -> None:
        """Write the record; raise ``KafkaClientError`` if the broker did not take it."""
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
