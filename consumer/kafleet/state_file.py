"""The channel between a worker and its sidecar: a state file, and a tuning file beside it.

Why a file on a volume both containers mount (an ``emptyDir``), rather than an HTTP endpoint in
the worker: the sidecar must tell the truth when the worker is hung, starved, crashed or not
started yet. An endpoint inside the worker hangs or dies with it; a file that stops changing
says all of that, and reading it needs nothing from the worker. The worker rewrites it
atomically (a temporary file, then ``os.replace``) every ``state_interval_ms`` with its
snapshot, the wall-clock time, its pid and its pid namespace, so the sidecar can tell fresh
from stale and, when the pod shares one process namespace, dead from alive. On a clean stop
it writes ``"stopped": true``.

The other direction: ``tuning.json`` beside the state file holds new ``max_poll_records`` and
``concurrency`` values (the sidecar's ``POST /tune`` writes it, for the operator); the worker
applies a new one at its next write, without a restart or a rebalance, and reports its ``id``
back as ``tuning_applied``.

Owns the file formats and both ends' reading and writing; not the meaning of the state
(``state.py``, the sidecar).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kafleet.errors import ConfigError

log = logging.getLogger(__name__)
TUNING_NAME = "tuning.json"


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


def write_tuning(state_file: Path, **values: int) -> str:
    """Ask the worker to apply new tunables; returns the request's id."""
    allowed = {"max_poll_records", "concurrency"}
    unknown = set(values) - allowed
    if unknown or not values:
        raise ValueError(f"tuning takes {sorted(allowed)}, got {sorted(values)}")
    request_id = uuid.uuid4().hex
    write_atomically(state_file.with_name(TUNING_NAME), {"id": request_id, **values})
    return request_id


class StatePublisher:
    """A thread that writes ``snapshot()`` to ``path`` and applies tuning found beside it."""

    def __init__(
        self,
        path: Path,
        interval_s: float,
        snapshot: Callable[[], dict[str, Any]],
        tune: Callable[..., None],
    ) -> None:
        self.path = path
        self.interval_s = interval_s
        self.snapshot = snapshot
        self.tune = tune
        self.tuning_applied: str | None = None
        self.tuning_error: str | None = None
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
                self.apply_tuning()
                self.publish()
            except Exception:  # a full disk must not end the worker: say so, keep going
                log.exception("could not publish the worker's state to %s", self.path)

    def publish(self, stopped: bool = False) -> None:
        state = {
            **self.snapshot(),
            **self._identity,
            "written_at": time.time(),
            "stopped": stopped,
            "tuning_applied": self.tuning_applied,
            "tuning_error": self.tuning_error,
        }
        write_atomically(self.path, state)

    def apply_tuning(self) -> None:
        request = read_json(self.path.with_name(TUNING_NAME))
        if request is None or request.get("id") in (None, self.tuning_applied):
            return
        values = {k: int(v) for k, v in request.items() if k in ("max_poll_records", "concurrency")}
        try:
            self.tune(**values)
        except (ConfigError, ValueError, TypeError) as exc:
            self.tuning_error = f"{request.get('id')}: {exc}"
            log.error("rejected tuning %s: %s", request, exc)
        else:
            self.tuning_error = None
            log.info("applied tuning %s", values)
        self.tuning_applied = str(request["id"])
