"""Kafka's Java admin client in a cluster's reading process: the JVM, and the one client in it.

librdkafka reads neither a share group's offsets (KIP-932) nor many consumer groups' committed
offsets in one request (its admin asks one group per OffsetFetch, after a FindCoordinator of
its own each time); Kafka's Java admin does both (``listShareGroupOffsets``, and
``listConsumerGroupOffsets`` with many groups: one batched FindCoordinator, KIP-699, and one
OffsetFetch per coordinator, KIP-709, since Kafka clients 3.3). So a reading process may run
it, in an in-process JVM (JPype, as the worker's share consumer: ``kafleet.share``).

Owns: the classpath (``KAFLEET_SHARE__CLASSPATH``, which ``kafleet operator --share-classpath``
sets and the kafleet-spark image sets); starting the JVM once, lazily, at the first read that
needs it, in a reading process (never in the operator's own: ``readers.py`` spawns the reading
processes, and the JVM dies with its own); the JVM options of that small client; one Java
admin per cluster connection (``JavaAdmin.client``), or why there is none (``Unavailable``: no
classpath, no Java, no JPype, a property the client refuses), which is final for the process
(a JPype JVM cannot start twice); and a Java exception as a Kafka error code and Kafka's words
(``error``).

Does not own what is asked of it: a share group's states (``share_lag.py``), consumer groups'
committed offsets (``committed.py``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError

from kafleet.config.model import ConsumerConfig
from kafleet.config.security import Security
from kafleet.config.share import CLASSPATH_ENV, admin_properties
from kafleet.errors import ConfigError
from kafleet.share import jvm

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
TIMEOUT_MS = "10000"  # a request's, and a call's by default (``clusters.TIMEOUT_S``)


@dataclass(frozen=True)
class Unavailable:
    """Why this process has no Java admin: ``code`` is ``KafkaError._NOT_CONFIGURED`` where
    the operator was not given one that runs (``why`` says what to set), else the code of the
    error the client was made with."""

    code: int
    why: str


class JavaAdmin:
    """One cluster connection's Java admin, made at the first ``client()`` (the JVM started
    then, once per process)."""

    def __init__(self, bootstrap: str, security: Security, classpath: str | None) -> None:
        self.bootstrap, self.security, self.classpath = bootstrap, security, classpath
        self._admin: Any = None
        self._unavailable: Unavailable | None = None

    def client(self) -> Any:
        """The Java ``Admin``, or the ``Unavailable`` that says why there is none."""
        if self._admin is not None:
            return self._admin
        if self._unavailable is None:
            self._admin, self._unavailable = self._make()
        return self._admin if self._admin is not None else self._unavailable

    def close(self) -> None:
        """Close the client, if one was made (a reading process's goes with its JVM)."""
        if self._admin is not None:
            self._admin.close(jvm.java("java.time.Duration").ZERO)
            self._admin = None

    def _make(self) -> tuple[Any, Unavailable | None]:
        missing = KafkaError._NOT_CONFIGURED
        if not self.classpath:
            return None, Unavailable(
                missing,
                f"set {CLASSPATH_ENV} (or kafleet operator --share-classpath) to Kafka's Java "
                "client's jars (`kafleet share-jars DIR`, then DIR/*; the kafleet-spark image "
                "has them and sets it), and run the operator where Java 11+ and JPype are",
            )
        try:
            jvm.start(self.classpath, JVM_OPTIONS)
        except ConfigError as exc:
            said = "; ".join(p.reason for p in exc.problems)
            return None, Unavailable(missing, f"{CLASSPATH_ENV}={self.classpath}: {said}")
        except ValueError as exc:  # JPype's JVMNotFoundException: no Java found
            return None, Unavailable(missing, f"no Java 11+ found (JAVA_HOME, PATH): {exc}")
        # Only the connection matters here (``admin_properties`` reads nothing else).
        config = ConsumerConfig.model_construct(
            bootstrap_servers=self.bootstrap, security=self.security
        )
        properties = {
            **admin_properties(config),
            "client.id": "kafleet-operator",
            "request.timeout.ms": TIMEOUT_MS,
            "default.api.timeout.ms": TIMEOUT_MS,
        }
        import jpype

        props = jvm.java("java.util.Properties")()
        for key, value in properties.items():
            props.setProperty(key, value)
        try:
            return jvm.java("org.apache.kafka.clients.admin.Admin").create(props), None
        except jpype.JException as exc:  # a property Java's admin client refuses
            code, text = error(exc)
            return None, Unavailable(
                code, f"Kafka's Java admin client refused the connection: {text}"
            )


def error(exc: Exception) -> tuple[int, str]:
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


def classpath() -> str | None:
    """The Java client's classpath this process was given (``CLASSPATH_ENV``)."""
    return os.environ.get(CLASSPATH_ENV) or None
