"""The channel between a worker and its sidecar: a state file on a volume both mount.

Why a file on a volume both containers mount (an ``emptyDir``), rather than an HTTP endpoint in
the worker: the sidecar must tell the truth when the worker is hung, starved, crashed or not
started yet. An endpoint inside the worker hangs or dies with it; a file that stops changing
says all of that, and reading it needs nothing from the worker. The worker rewrites it
atomically (a temporary file, then ``os.replace``) every ``state_interval_ms`` with its
snapshot, the wall-clock time, its pid and its pid namespace, so the sidecar can tell fresh
from stale and, when the pod shares one process namespace, dead from alive. On a clean stop
it writes ``"stopped": true``.

One direction only: nothing flows back from the sidecar. Live tuning reaches the worker through
its watched configuration file (``live_config.py``; the operator's ConfigMap), the one way.

Owns the file format and both ends' reading and writing; not the meaning of the state
(``state.py``, the sidecar).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def write_atomically(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, separators=(",", ":"), default=str))
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, Any] | None:
    """The file's object, or None if it is missing or half-written (never raises)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class StatePublisher:
    """A thread that writes ``snapshot()`` to ``path`` every ``interval_s``."""

    def __init__(
        self,
        path: Path,
        interval_s: float,
        snapshot: Callable[[], dict[str, Any]],
    ) -> None:
        self.path = path
        self.interval_s = interval_s
        self.snapshot = snapshot
        self._identity = {
            "pid": os.getpid(),
            "pid_namespace": pid_namespace(),
            "hostname": socket.gethostname(),
        }
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kafleet-state", daemon=True)

    def start(self) -> StatePublisher:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.publish()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.publish(stopped=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.publish()
            except Exception:  # a full disk must not end the worker: say so, keep going
                log.exception("could not publish the worker's state to %s", self.path)

    def publish(self, stopped: bool = False) -> None:
        state = {
            **self.snapshot(),
            **self._identity,
            "written_at": time.time(),
            "stopped": stopped,
        }
        write_atomically(self.path, state)
