"""Each cluster's offsets read in a process of its own, so a librdkafka crash costs one read.

Owns: one child process per distinct Kafka connection (``snapshots.Target.key``), started
with ``spawn`` (never a fork of the operator's threads), holding that cluster's
``clusters.View`` (its one admin client, its metadata cache; and, where
``KAFLEET_SHARE__CLASSPATH`` names Kafka's Java client as the child starts, a JVM with Kafka's
Java admin from the first read on, ``java_admin.py``: about 90 MB more) for as long as groups
read there; a read sent over a pipe and its snapshot sent back (errors as
``snapshots.Failure``: librdkafka's do not pickle); and what happens when the child dies
(librdkafka#5040, see ``clusters.py``) or does not answer within the read's timeout: the read
fails with a message that says so, the child is stopped, and the next read starts a new one.
A child exits when the operator does (its pipe closes).

``Readers`` keeps them by connection: one no group has read for ``IDLE_S`` is stopped, as is
one whose credentials Kafka refused (the next read connects with what the Secrets say then).

Does not own what is read (``clusters.py``) or when (``periodic.py``).
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import threading
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from kafleet.config.security import Security
from kafleet_operator.reading import clusters, java_admin, snapshots

log = logging.getLogger("kafleet.operator")


@dataclass(frozen=True)
class _Died:
    """A read whose child process died or did not answer."""

    error: KafkaException


IDLE_S = 300.0
ANSWER_S = clusters.TIMEOUT_S * 2 + 5.0  # a read's own deadline, its retries, and a margin
_context = multiprocessing.get_context("spawn")


def serve(
    conn: multiprocessing.connection.Connection,
    bootstrap: str,
    security: Security,
    share_classpath: str | None = None,
) -> None:
    """The child: read what the operator asks, until it hangs up. A client that cannot be
    made (an SSL file missing) answers every read with why."""
    view: clusters.View | None = None
    refused = snapshots.Failure(KafkaError._FAIL, "no client")
    try:
        view = clusters.View(bootstrap, security, share_classpath)
    except KafkaException as exc:
        refused = snapshots.Failure.of(exc)
    while True:
        try:
            wants = conn.recv()
        except (EOFError, OSError):
            return
        answer: snapshots.Snapshot | snapshots.Failure = refused
        try:
            if view is not None:
                answer = view.read(wants)
        except KafkaException as exc:
            answer = snapshots.Failure.of(exc)
        except Exception as exc:  # a defect: this process's stderr has it
            log.exception("reading offsets failed")
            answer = snapshots.Failure(KafkaError._FAIL, f"reading offsets failed: {exc!r}")
        conn.send(answer)


class Reader:
    """The operator's side of one cluster's child process."""

    def __init__(self, target: snapshots.Target) -> None:
        self.bootstrap, self.security = target.bootstrap, target.security
        self.used_at = time.monotonic()
        self.process: Any = None
        self.conn: multiprocessing.connection.Connection | None = None
        self._lock = threading.Lock()

    def _start(self) -> multiprocessing.connection.Connection:
        ours, theirs = _context.Pipe()
        self.process = _context.Process(
            target=serve,
            args=(theirs, self.bootstrap, self.security, java_admin.classpath()),
            name=f"kafleet-kafka {self.bootstrap}",
            daemon=True,
        )
        self.process.start()
        theirs.close()
        self.conn = ours
        return ours

    def read(self, wants: list[snapshots.Want]) -> snapshots.Snapshot | KafkaException:
        """The snapshot, or the ``KafkaException`` that kept it (never raises it). A child
        that dies in a read (librdkafka#5040: a coordinator moving) is replaced and the read
        asked once more at once: the coordinator has usually settled by then."""
        with self._lock:  # one read at a time on the pipe (a standby's touch, a pass's read)
            found = self._once(wants)
            if isinstance(found, _Died):
                found = self._once(wants)
        return found.error if isinstance(found, _Died) else found

    def _once(self, wants: list[snapshots.Want]) -> snapshots.Snapshot | KafkaException | _Died:
        self.used_at = time.monotonic()
        conn = self.conn or self._start()
        try:
            conn.send(wants)
            if conn.poll(ANSWER_S):
                answer = conn.recv()
                if isinstance(answer, snapshots.Failure):
                    return answer.exception()
                return answer  # type: ignore[no-any-return]
            hung = True
            why = f"no answer in {ANSWER_S:.0f} s"
        except (EOFError, OSError):
            hung = False
            code = self.process.exitcode if self.process is not None else None
            why = f"its process stopped (exit {code})"
        self.close()
        log.warning("reading the offsets of %s failed: %s", self.bootstrap, why)
        text = f"reading the offsets of {self.bootstrap} failed: {why}"
        error = KafkaException(KafkaError(KafkaError._FAIL, text))
        return error if hung else _Died(error)

    def close(self) -> None:
        """Stop the child without waiting for it (``multiprocessing`` reaps it later)."""
        if self.conn is not None:
            self.conn.close()
        if self.process is not None and self.process.is_alive():
            self.process.kill()
        self.conn, self.process = None, None
        multiprocessing.active_children()  # reaps the children that have ended


class Readers:
    """Every cluster's reader, by connection."""

    def __init__(self) -> None:
        self._readers: dict[str, Reader] = {}

    def __len__(self) -> int:
        return len(self._readers)

    def get(self, target: snapshots.Target) -> Reader:
        reader = self._readers.get(target.key)
        if reader is None:
            reader = self._readers[target.key] = Reader(target)
        return reader

    def drop(self, key: str) -> None:
        reader = self._readers.pop(key, None)
        if reader is not None:
            reader.close()

    def sweep(self, busy: set[str]) -> None:
        """Stop the readers no group has used for ``IDLE_S`` (not one reading now)."""
        now = time.monotonic()
        for key in [k for k, r in self._readers.items() if now - r.used_at > IDLE_S]:
            if key not in busy:
                self.drop(key)

    def close(self) -> None:
        for key in list(self._readers):
            self.drop(key)
