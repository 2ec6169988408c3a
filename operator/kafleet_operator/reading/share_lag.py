"""Share groups' offsets (KIP-932), read through Kafka's Java admin in a cluster's reading process.

A share group has no committed offset: each partition has a start offset (every record before
it is done: acknowledged or archived) and, past it, records in flight, some done already.
KIP-1226's lag counts the records neither acknowledged nor archived; librdkafka reads none of
this, so Kafka's own Java admin client does (``java_admin.py``: the JVM, started at the first
read that needs it, and the one admin of the cluster connection).

Owns: reading every share group of a pass at once (``ShareOffsets.read``): each partition's
start offset and lag, either ``None`` where the broker does not know it (``ShareState``; a
partition the broker has no state for, or answered with an error, which Java's admin leaves
out, is not there at all), or a group's error code and Kafka's words (``clusters.py`` makes
them a ``Failure``). When there is no client (no classpath, no Java, no JPype), every share
group's reading fails with what to set (``KafkaError._NOT_CONFIGURED``), and the consumer
groups of the cluster are read as ever.

Does not own what the offsets mean (``lag_reader.py``), the JVM and the client
(``java_admin.py``) or the rest of a cluster's read (``clusters.py``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError

from kafleet.config.security import Security
from kafleet.share import jvm
from kafleet_operator.reading import java_admin

TP = tuple[str, int]
NOT_CONFIGURED = KafkaError._NOT_CONFIGURED


@dataclass(frozen=True)
class ShareState:
    """One partition of a share group, as the broker says it: ``start`` (None: the group has
    no start offset there yet) and ``lag`` (KIP-1226; None: the broker cannot tell)."""

    start: int | None
    lag: int | None


Answer = dict[TP, ShareState] | tuple[int, str]  # a group's partitions, or (code, words)


def no_client(why: str) -> tuple[int, str]:
    return (
        NOT_CONFIGURED,
        f"a share group's lag is read with Kafka's Java admin client, in a JVM of the "
        f"operator's: {why}",
    )


def _states(admin: Any, groups: list[str], timeout_s: float) -> dict[str, Answer]:
    """Many groups' start offsets and lags in one round of the Java ``admin``."""
    import jpype

    java = jvm.java
    specs = java("java.util.HashMap")()
    for group in groups:
        specs.put(group, java("org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec")())
    deadline = time.monotonic() + timeout_s
    result = admin.listShareGroupOffsets(specs)
    futures = {group: result.partitionsToOffsetInfo(group) for group in groups}
    millis = java("java.util.concurrent.TimeUnit").MILLISECONDS
    found: dict[str, Answer] = {}
    for group, future in futures.items():
        left = max(100, int((deadline - time.monotonic()) * 1000))
        try:
            answer = future.get(left, millis)
        except jpype.JException as exc:
            found[group] = java_admin.error(exc)
            continue
        states: dict[TP, ShareState] = {}
        for entry in answer.entrySet():
            tp, info = entry.getKey(), entry.getValue()
            key = (str(tp.topic()), int(tp.partition()))
            if info is None:  # the broker has no start offset for it
                states[key] = ShareState(None, None)
                continue
            lag = info.lag()
            start = int(info.startOffset())
            states[key] = ShareState(
                start if start >= 0 else None,
                int(lag.get()) if lag is not None and lag.isPresent() else None,
            )
        found[group] = states
    return found


class ShareOffsets:
    """One cluster connection's share groups, read through its Java admin (``java``: the
    view's, shared with its committed offsets; one of its own if none is given)."""

    def __init__(
        self,
        bootstrap: str,
        security: Security,
        classpath: str | None,
        java: java_admin.JavaAdmin | None = None,
    ) -> None:
        self.java = java or java_admin.JavaAdmin(bootstrap, security, classpath)

    def read(self, groups: list[str], timeout_s: float) -> dict[str, Answer]:
        """Each group's partitions (those the broker has a state for), or the code and words
        of why not."""
        client = self.java.client()
        if isinstance(client, java_admin.Unavailable):
            if client.code == NOT_CONFIGURED:
                return dict.fromkeys(groups, no_client(client.why))
            return dict.fromkeys(groups, (client.code, client.why))
        return _states(client, groups, timeout_s)


def classpath() -> str | None:
    """The Java client's classpath this process was given (``java_admin.classpath``)."""
    return java_admin.classpath()
