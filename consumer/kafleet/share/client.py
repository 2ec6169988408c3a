"""Kafka's Java share consumer and admin, in Python terms.

Owns: ``ShareClient``, one ``KafkaShareConsumer`` (explicit acknowledgement: every record of a
poll is acknowledged before the next poll) whose every call but ``wakeup`` comes from the
thread that owns it; turning its records into ``ShareRecord`` (a ``Record`` with its delivery
count and the Java record to acknowledge); counting the acknowledgements the broker refused
(a record whose lock ran out went back to the group); and ``ShareAdmin``: a share group's
configs (``incrementalAlterConfigs`` on the GROUP resource) and its lag per partition (KIP-1226;
``None`` where the broker does not know it, never 0). Java's exceptions come out as
``ShareClientError`` (``ConfigError`` for a property the client refuses, naming ``kafka``).

Does not own what to acknowledge (``outcomes.py``) or threads (``member.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from kafleet.engine.record import Record
from kafleet.errors import ConfigError, FieldProblem, KafleetError
from kafleet.share.jvm import java

TP = tuple[str, int]


class ShareClientError(KafleetError):
    """A call of the Java share client failed; the message is Java's."""


class Ack(Enum):
    ACCEPT = "ACCEPT"
    RELEASE = "RELEASE"
    REJECT = "REJECT"


@dataclass(frozen=True, slots=True)
class ShareRecord:
    record: Record
    delivery_count: int  # 1 on a first delivery
    handle: Any  # the Java ConsumerRecord, to acknowledge


def _bytes(array: Any) -> bytes | None:
    return None if array is None else bytes(array)


def _record(raw: Any) -> ShareRecord:
    headers = tuple((str(h.key()), _bytes(h.value())) for h in raw.headers().toArray())
    count = raw.deliveryCount()
    ts = int(raw.timestamp())
    record = Record(
        str(raw.topic()),
        int(raw.partition()),
        int(raw.offset()),
        _bytes(raw.key()),
        _bytes(raw.value()),
        headers,
        ts if ts >= 0 else None,
    )
    return ShareRecord(record, int(count.get()) if count.isPresent() else 1, raw)


def _java_error(exc: Exception, doing: str) -> ShareClientError:
    message = exc.getMessage() if hasattr(exc, "getMessage") else str(exc)
    return ShareClientError(f"{doing}: {type(exc).__name__}: {message}")


class ShareClient:
    """One Java ``KafkaShareConsumer`` subscribed to ``topics``."""

    def __init__(self, properties: Mapping[str, str], topics: list[str]) -> None:
        self._consumer = self._make(properties)
        self.refused = 0  # acknowledgements the broker did not take (the lock was gone)
        self.last_refusal: str | None = None
        self._refused_lock = threading.Lock()
        self._consumer.setAcknowledgementCommitCallback(_Callback(self))
        self._consumer.subscribe(java("java.util.List").of(*topics))
        self._ack_types = {
            ack: getattr(java("org.apache.kafka.clients.consumer.AcknowledgeType"), ack.value)
            for ack in Ack
        }

    @staticmethod
    def check(properties: Mapping[str, str]) -> None:
        """Raise ``ConfigError`` naming ``kafka`` if the Java client refuses the properties
        (a consumer is made and closed, never subscribed)."""
        ShareClient._make(properties).close(java("java.time.Duration").ZERO)

    @staticmethod
    def _make(properties: Mapping[str, str]) -> Any:
        props = java("java.util.Properties")()
        for key, value in properties.items():
            props.setProperty(key, value)
        try:
            return java("org.apache.kafka.clients.consumer.KafkaShareConsumer")(props)
        except Exception as exc:  # a ConfigException: a property it does not take
            message = str(exc.getMessage() if hasattr(exc, "getMessage") else exc)
            raise ConfigError(
                [FieldProblem("kafka", f"the Java share consumer refused it: {message}")]
            ) from exc

    def poll(self, timeout_s: float) -> list[ShareRecord]:
        """The records this poll acquired (the acknowledgements made since the last poll go
        with it); ``[]`` when woken up."""
        duration = java("java.time.Duration").ofMillis(int(timeout_s * 1000))
        try:
            polled = self._consumer.poll(duration)
        except java("org.apache.kafka.common.errors.WakeupException"):
            return []
        except Exception as exc:
            raise _java_error(exc, "polling the share group") from exc
        return [_record(raw) for raw in polled]

    def lock_ms(self) -> int | None:
        """The lock on the records of the last poll, as the broker said."""
        found = self._consumer.acquisitionLockTimeoutMs()
        return int(found.get()) if found.isPresent() else None

    def acknowledge(self, record: ShareRecord, ack: Ack) -> None:
        try:
            self._consumer.acknowledge(record.handle, self._ack_types[ack])
        except Exception as exc:
            raise _java_error(exc, f"acknowledging {record.record} as {ack.value}") from exc

    def commit(self, timeout_s: float) -> None:
        """Send the acknowledgements made so far and wait for the broker's answer (a
        ``wakeup`` left from a stop does not cut it short: it is tried once more)."""
        timeout = java("java.time.Duration").ofMillis(int(timeout_s * 1000))
        for _ in range(2):
            try:
                self._consumer.commitSync(timeout)
                return
            except java("org.apache.kafka.common.errors.WakeupException"):
                continue
            except Exception as exc:
                raise _java_error(exc, "committing acknowledgements") from exc

    def commit_async(self) -> None:
        """Send the acknowledgements made so far; the broker's answer comes in a later call."""
        try:
            self._consumer.commitAsync()
        except Exception as exc:
            raise _java_error(exc, "committing acknowledgements") from exc

    def wakeup(self) -> None:
        """Any thread: end a blocking poll now."""
        self._consumer.wakeup()

    def close(self, timeout_s: float = 10.0) -> None:
        """Commit what is acknowledged, release what is not, leave the group."""
        try:
            self._consumer.close(java("java.time.Duration").ofMillis(int(timeout_s * 1000)))
        except Exception as exc:
            raise _java_error(exc, "closing the share consumer") from exc

    def _refusals(self, failed: int, why: str) -> None:
        with self._refused_lock:
            self.refused += failed
            self.last_refusal = why


def _callback_class() -> Any:
    import jpype

    @jpype.JImplements("org.apache.kafka.clients.consumer.AcknowledgementCommitCallback")
    class Callback:
        def __init__(self, client: ShareClient) -> None:
            self.client = client

        @jpype.JOverride  # type: ignore[untyped-decorator]
        def onComplete(self, offsets: Any, exception: Any) -> None:  # noqa: N802 (Java's name)
            if exception is not None:
                failed = sum(int(s.size()) for s in offsets.values())
                self.client._refusals(failed, str(exception.getMessage()))

    return Callback


_callback: Any = None
_callback_lock = threading.Lock()  # members open their clients side by side


def _Callback(client: ShareClient) -> Any:  # noqa: N802 (a class, made once the JVM runs)
    global _callback
    with _callback_lock:
        if _callback is None:
            _callback = _callback_class()
    return _callback(client)


class ShareAdmin:
    """A Java ``Admin`` for a share group's configs and lag."""

    def __init__(self, properties: Mapping[str, str]) -> None:
        props = java("java.util.Properties")()
        for key, value in properties.items():
            props.setProperty(key, value)
        self._admin = java("org.apache.kafka.clients.admin.Admin").create(props)

    def set_group_configs(self, group: str, configs: Mapping[str, str], timeout_s: float) -> None:
        """Set these configs of the share group (it need not exist yet)."""
        resource = java("org.apache.kafka.common.config.ConfigResource")
        op = java("org.apache.kafka.clients.admin.AlterConfigOp")
        entry = java("org.apache.kafka.clients.admin.ConfigEntry")
        ops = java("java.util.ArrayList")()
        for key, value in configs.items():
            ops.add(op(entry(key, value), op.OpType.SET))
        target = resource(resource.Type.GROUP, group)
        try:
            self._admin.incrementalAlterConfigs(java("java.util.Map").of(target, ops)).all().get(
                int(timeout_s * 1000), java("java.util.concurrent.TimeUnit").MILLISECONDS
            )
        except Exception as exc:
            raise _java_error(exc, f"setting share group {group}'s configs") from exc

    def lag(self, group: str, timeout_s: float) -> dict[TP, int | None]:
        """Each partition's lag: records neither acknowledged nor archived yet; ``None`` where
        the broker does not know it (a partition the group has not started)."""
        spec = java("org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec")()
        try:
            found = (
                self._admin.listShareGroupOffsets(java("java.util.Map").of(group, spec))
                .partitionsToOffsetInfo(group)
                .get(int(timeout_s * 1000), java("java.util.concurrent.TimeUnit").MILLISECONDS)
            )
        except Exception as exc:
            raise _java_error(exc, f"reading share group {group}'s lag") from exc
        lags: dict[TP, int | None] = {}
        for entry in found.entrySet():
            tp, info = entry.getKey(), entry.getValue()
            lag = None if info is None else info.lag()
            key = (str(tp.topic()), int(tp.partition()))
            lags[key] = int(lag.get()) if lag is not None and lag.isPresent() else None
        return lags

    def close(self) -> None:
        self._admin.close(java("java.time.Duration").ofSeconds(5))
