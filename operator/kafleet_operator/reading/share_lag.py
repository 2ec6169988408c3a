"""Share groups' offsets (KIP-932), read through Kafka's Java admin in a cluster's reading process.

A share group has no committed offset: each partition has a start offset (every record before
it is done: acknowledged or archived) and, past it, records in flight, some done already.
KIP-1226's lag counts the records neither acknowledged nor archived; librdkafka reads none of
this, so Kafka's own Java admin client does, in an in-process JVM (JPype, as the worker's share
consumer: ``kafleet.share``).

Owns: the operator's share client: its classpath (``KAFLEET_SHARE__CLASSPATH``, which
``kafleet operator --share-classpath`` sets and the kafleet-spark image sets), starting the JVM
once, lazily, in the reading process of a cluster that has a share group (never in the
operator's own process: ``readers.py`` spawns the reading processes, and the JVM dies with its
own), the JVM options of that small client, one Java admin per cluster connection, and reading
every share group of a pass at once (``ShareOffsets.read``): each partition's start offset and
lag, either ``None`` where the broker does not know it (``ShareState``; a partition the broker
has no state for, or answered with an error, which Java's admin leaves out, is not there at
all), or a group's error code and Kafka's words (``clusters.py`` makes them a ``Failure``).
When there is no client (no classpath, no Java, no JPype), every share group's reading fails
with what to set (``KafkaError._NOT_CONFIGURED``), and the consumer groups of the cluster are
read as ever.

Does not own what the offsets mean (``lag_reader.py``) or the rest of a cluster's read
(``clusters.py``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError

from kafleet.config.model import ConsumerConfig
from kafleet.config.security import Security
from kafleet.config.share import CLASSPATH_ENV, admin_properties
from kafleet.errors import ConfigError
from kafleet.share import jvm
from kafleet.share.client import ShareAdmin

TP = tuple[str, int]
# An admin client's JVM, not a consumer's: a small heap, one GC thread, no optimising compiler,
# no hsperfdata file (the operator's root filesystem is read-only). About 90 MB more resident
# in the reading process (140 MB with its librdkafka client, measured on the test bed). -Xrs:
# no signal handlers of Java's. The process has no SIGTERM handler of its own (multiprocessing
# sends SIGTERM to it as the operator exits), and Java's ran the JVM's shutdown into JPype,
# which crashed the process (SIGSEGV in PyObject_RichCompare, an hs_err_pid file left behind).
JVM_OPTIONS = [
    "-Xrs",
    "-Xmx64m",
    "-Xss512k",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:-UsePerfData",
]
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


class _Admin(ShareAdmin):
    """``ShareAdmin`` reading many groups' start offsets and lags in one round."""

    def states(self, groups: list[str], timeout_s: float) -> dict[str, Answer]:
        import jpype

        java = jvm.java
        specs = java("java.util.HashMap")()
        for group in groups:
            specs.put(group, java("org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec")())
        deadline = time.monotonic() + timeout_s
        result = self._admin.listShareGroupOffsets(specs)
        futures = {group: result.partitionsToOffsetInfo(group) for group in groups}
        millis = java("java.util.concurrent.TimeUnit").MILLISECONDS
        found: dict[str, Answer] = {}
        for group, future in futures.items():
            left = max(100, int((deadline - time.monotonic()) * 1000))
            try:
                answer = future.get(left, millis)
            except jpype.JException as exc:
                found[group] = _error(exc)
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


def _error(exc: Exception) -> tuple[int, str]:
    """A Java exception (an ``ExecutionException`` wraps Kafka's) as a code and Kafka's words."""
    cause: Any = exc
    while hasattr(cause, "getCause") and cause.getCause() is not None:
        cause = cause.getCause()
    kind = type(cause).__name__.rsplit(".", 1)[-1]
    message = cause.getMessage() if hasattr(cause, "getMessage") else str(cause)
    text = f"{kind}: {message}"
    if "Authentication" in kind or "Sasl" in kind or "SslAuthentication" in kind:
        return KafkaError._AUTHENTICATION, text
    if "Timeout" in kind:
        return KafkaError._TIMED_OUT, text
    if "GroupAuthorization" in kind:
        return KafkaError.GROUP_AUTHORIZATION_FAILED, text
    return KafkaError._FAIL, text


class ShareOffsets:
    """One cluster connection's share groups, read through a Java admin made at the first
    read (the JVM started then, once per process)."""

    def __init__(self, bootstrap: str, security: Security, classpath: str | None) -> None:
        self.bootstrap, self.security, self.classpath = bootstrap, security, classpath
        self._admin: _Admin | None = None
        self._unavailable: tuple[int, str] | None = None

    def _client(self) -> _Admin | tuple[int, str]:
        if self._admin is not None:
            return self._admin
        if self._unavailable is not None:  # a JVM that did not start never starts here
            return self._unavailable
        if not self.classpath:
            self._unavailable = no_client(
                f"set {CLASSPATH_ENV} (or kafleet operator --share-classpath) to Kafka's Java "
                "client's jars (`kafleet share-jars DIR`, then DIR/*; the kafleet-spark image "
                "has them and sets it), and run the operator where Java 11+ and JPype are"
            )
            return self._unavailable
        try:
            jvm.start(self.classpath, JVM_OPTIONS)
        except ConfigError as exc:
            said = "; ".join(p.reason for p in exc.problems)
            self._unavailable = no_client(f"{CLASSPATH_ENV}={self.classpath}: {said}")
            return self._unavailable
        except ValueError as exc:  # JPype's JVMNotFoundException: no Java found
            self._unavailable = no_client(f"no Java 11+ found (JAVA_HOME, PATH): {exc}")
            return self._unavailable
        # Only the connection matters here (``admin_properties`` reads nothing else).
        config = ConsumerConfig.model_construct(
            bootstrap_servers=self.bootstrap, security=self.security
        )
        properties = {
            **admin_properties(config),
            "client.id": "kafleet-operator-share",
            "request.timeout.ms": "10000",
            "default.api.timeout.ms": "10000",
        }
        import jpype

        try:
            self._admin = _Admin(properties)
        except jpype.JException as exc:  # a property Java's admin client refuses
            code, text = _error(exc)
            self._unavailable = (code, f"Kafka's Java admin client refused the connection: {text}")
            return self._unavailable
        return self._admin

    def read(self, groups: list[str], timeout_s: float) -> dict[str, Answer]:
        """Each group's partitions (those the broker has a state for), or the code and words
        of why not."""
        client = self._client()
        if isinstance(client, tuple):
            return dict.fromkeys(groups, client)
        return client.states(groups, timeout_s)


def classpath() -> str | None:
    """The share client's classpath this process was given (``CLASSPATH_ENV``)."""
    return os.environ.get(CLASSPATH_ENV) or None
