"""The record a handler receives: a plain, immutable copy of one Kafka message.

Owns: the ``Record`` type and its construction from a confluent-kafka ``Message``. Handlers of
one record at a time get a ``Record`` (plain data, easy to build in a test); batch handlers get
the client's messages as they came, and no ``Record`` is built for them (``runs.py``).
"""

from __future__ import annotations

from typing import NamedTuple

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Message

Headers = tuple[tuple[str, bytes | None], ...]


class Record(NamedTuple):
    """One Kafka record. Immutable; a NamedTuple because the Poller builds one per message and
    a tuple is the cheapest immutable object Python builds."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()
    timestamp_ms: int | None = None  # the record's timestamp, if the broker gave one

    @property
    def tp(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    @property
    def size(self) -> int:
        """Bytes of key and value, the unit of a sink batch's byte bound."""
        return len(self.key or b"") + len(self.value or b"")

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"

    @classmethod
    def from_message(cls, msg: Message) -> Record:
        return of_message(msg.topic() or "", msg.partition() or 0, msg)


_new_record = tuple.__new__


def of_message(topic: str, partition: int, msg: Message) -> Record:
    """The ``Record`` of a message whose partition the caller knows (a run's): positional
    and without the keyword machinery, since a handler of one record at a time pays for it
    on every record."""
    kind, ts = msg.timestamp()
    headers = msg.headers()  # a list of (name, value) pairs, or None
    return _new_record(
        Record,
        (
            topic,
            partition,
            msg.offset(),
            msg.key(),
            msg.value(),
            _headers(headers) if headers else (),
            None if kind == TIMESTAMP_NOT_AVAILABLE else ts,
        ),
    )


def _headers(
    raw: dict[str, str | bytes | None] | list[tuple[str, str | bytes | None]] | None,
) -> Headers:
    if not raw:
        return ()
    pairs = raw.items() if isinstance(raw, dict) else raw
    return tuple((k, v.encode() if isinstance(v, str) else v) for k, v in pairs)
