"""Reading a group's sidecars: each ready pod's ``/status``, as the operator's passes need it.

Owns: the URL of a pod's sidecar (an IPv6 address in brackets), and asking the sidecars of a
group's pods that count (Ready, not terminating: ``watched.py`` keeps them from the operator's
watch of the pods, no list per pass) on one small pool of threads shared by every group, over
kept-alive connections (``http_pool.py``: one pool of them per process, at most one per thread
to a sidecar; kafleet's sidecar keeps HTTP/1.1 connections, so a pass reuses the last pass's),
with a short timeout. A sidecar that does not answer, or answers anything but a 2xx (a busy
sidecar's ``503``, too), is left out, never guessed, and not asked again for a while
(doubling), so a hung or unreachable pod costs the other groups nothing. The autoscaler and
the tuner of one pass share one round of asking.

Does not own what the figures mean (``tuner.py``, ``autoscaler.py``) or the sidecar itself
(``kafleet.sidecar.server``).
"""

from __future__ import annotations

import concurrent.futures
import http.client
import ipaddress
import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from kafleet_operator.reading import http_pool, watched

log = logging.getLogger("kafleet.operator")
# `kafleet operator --sidecar-url` sets this (before this module loads).
SIDECAR_URL = os.environ.get("KAFLEET_OPERATOR_SIDECAR_URL", "http://{pod_ip}:8080")
TIMEOUT_S = 1.0
PARALLEL = 2  # sidecars asked at once, over every group (answers take milliseconds)
SILENT_S, SILENT_MAX_S = 15.0, 300.0  # a pod that did not answer is left alone this long, doubling
DEADLINE_S = 2 * TIMEOUT_S + 0.5  # a group waits this long for its sidecars, at most
FRESH_S = 1.0  # the autoscaler and the tuner of one pass share one round of asking
_pool = concurrent.futures.ThreadPoolExecutor(PARALLEL, "kafleet-sidecars")
_connections = http_pool.Pool(per_host=PARALLEL)
_lock = threading.Lock()
_silent: dict[str, tuple[float, int]] = {}  # pod -> (not asked before, failures in a row)
_recent: dict[tuple[str, str], tuple[float, list[Report]]] = {}
_swept = 0.0  # when the two were last swept of what is too old to matter


@dataclass(frozen=True)
class Report:
    """One ready pod's sidecar answer: ``status`` is its ``/status`` JSON."""

    pod: str
    status: dict[str, Any]

    @property
    def worker(self) -> dict[str, Any]:
        """The worker's state as the sidecar last read it (empty before the first write)."""
        return dict(self.status.get("worker") or {})


def url(pod_ip: str, pod: str, template: str = "") -> str:
    """The sidecar's base URL for a pod; an IPv6 address is bracketed, as URLs need."""
    host = pod_ip
    try:
        if ipaddress.ip_address(pod_ip).version == 6:
            host = f"[{pod_ip}]"
    except ValueError:
        pass  # a name (a test's template may use one): as it is
    return (template or SIDECAR_URL).format(pod_ip=host, pod=pod)


def _fetch(base: str, pod: str) -> Report | None:
    try:
        answer = _connections.get(base + "/status", TIMEOUT_S)
        if not 200 <= answer.status < 300:
            raise ValueError(f"HTTP {answer.status}: {answer.body[:80]!r}")
        body = json.loads(answer.body)
    except (OSError, ValueError, http.client.HTTPException) as exc:
        log.debug("sidecar of %s did not answer: %s", pod, exc)
        with _lock:
            tries = _silent.get(pod, (0.0, 0))[1] + 1
            _silent[pod] = (
                time.monotonic() + min(SILENT_MAX_S, SILENT_S * 2 ** (tries - 1)),
                tries,
            )
        return None
    with _lock:
        _silent.pop(pod, None)
    return Report(pod, body) if isinstance(body, dict) else None


def read(namespace: str, name: str) -> list[Report]:
    """The ``/status`` of every ready, running pod of the group that answers (the pods as
    the operator's watch holds them, ``watched.py``); read at most once a second."""
    now = time.monotonic()
    with _lock:
        cached = _recent.get((namespace, name))
        if cached is not None and now - cached[0] < FRESH_S:
            return cached[1]
        asked = [
            (url(ip, pod), pod)
            for ip, pod in watched.ready_pods(namespace, name)
            if _silent.get(pod, (0.0, 0))[0] <= now
        ]
    futures = [_pool.submit(_fetch, *target) for target in asked]
    done, late = concurrent.futures.wait(futures, timeout=DEADLINE_S)
    for future in late:  # the pool is busy with other groups' silent pods: next pass
        future.cancel()
    answers = [a for f in futures if f in done and (a := f.result()) is not None]
    global _swept
    with _lock:
        _recent[(namespace, name)] = (now, answers)
        sweep = now - _swept > FRESH_S  # once a second, not once a group: a sweep visits all
        if sweep:
            _swept = now
            for key in [k for k, (at, _) in _recent.items() if now - at > FRESH_S]:
                del _recent[key]
            for pod in [p for p, (until, _) in _silent.items() if until + SILENT_MAX_S < now]:
                del _silent[pod]
    if sweep:
        _connections.sweep()  # the connections of pods no longer asked
    return answers
