"""Messages and chunks built without a broker, for the tests of the queues and the intake."""

from __future__ import annotations

from itertools import groupby

from confluent_kafka import Message

from kafleet.engine.runs import Chunk, Run


def msg(partition: int, offset: int, key: bytes | None = b"k", size: int = 10) -> Message:
    """A record of topic ``t``; ``size`` is its value's length."""
    return Message(topic="t", partition=partition, offset=offset, key=key, value=b"v" * size)


def chunks(messages: list[Message]) -> list[Chunk]:
    """Each stretch of one partition's messages as a chunk whose range starts at its first."""
    result = []
    for partition, stretch in groupby(messages, lambda m: m.partition()):
        group = list(stretch)
        result.append(Chunk(("t", partition), group[0].offset(), group, sum(len(m) for m in group)))
    return result


def where(run: Run | None) -> list[tuple[int, int]]:
    """A run's records as (partition, offset) pairs ([] for no run)."""
    return [] if run is None else [(m.partition(), m.offset()) for m in run.messages]
