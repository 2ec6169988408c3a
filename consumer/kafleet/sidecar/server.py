"""``kafleet sidecar``: the second container of every worker pod, telling the truth about it.

Owns: what the HTTP server answers (``/healthz``, ``/readyz``, ``/metrics``, ``/status``),
reading the worker's state file (see ``state_file.py`` for why a file) and feeding each
partition's lag window every second. A separate process, so it answers when the worker hangs,
crashes or has not started. The judgements are pure functions elsewhere: ``assessment.py``
(live, ready), ``lag.py`` (Burrow-style status), ``collector.py``; the server's bounds, its
kept-alive connections and its dual-stack socket are ``http_serving.py``'s (idle connections:
``keepalive.py``); the command line is ``command.py``'s.

- ``GET /healthz``: 200 or 503, a plain-text body saying which check fails and since when.
- ``GET /readyz``: 200 or 503 with the reason.
- ``GET /metrics``: Prometheus text, every name ``kafleet_*``.
- ``GET /status``: JSON: the worker's state, both verdicts and each partition's lag status.

Nothing else, and no ``POST``: the ``POST /tune`` it once had is gone (405). It was open to
the whole cluster through the metrics Service, and nothing needs it: the operator tunes
``max_poll_records`` through the ConfigMap, which the worker watches and applies live
(``live_config.py``). A second writer would make a pod differ from its ConfigMap, silently,
and its ``tuning.json`` on the pod's volume was applied again over the ConfigMap when the
worker container restarted. Serving it on localhost only would still leave that second
writer; one way to tune is simpler to reason about, and a by-hand experiment is a
``kubectl edit`` of the ConsumerGroup.

``/metrics`` is rendered once at a time and the page reused for a second, so scrapers side by
side cost one rendering (at 1,000 partitions a page is about 1.4 MB and 180 ms).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

from kafleet.health import assessment
from kafleet.health.state_file import pid_namespace, read_json
from kafleet.sidecar import http_serving
from kafleet.sidecar.collector import StateCollector, View
from kafleet.sidecar.lag import LagWindow, Sample, Status

log = logging.getLogger("kafleet.sidecar")


def _pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs: a killed process that is not yet reaped (a zombie) does not."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


class Sidecar:
    """Reads the state file and judges it; thread-safe, used by the HTTP handlers."""

    def __init__(
        self,
        state_file: Path,
        *,
        startup_grace_s: float = 60.0,
        poll_share: float = 0.5,
        stale_after_s: float = 10.0,
        lag_window: int = 10,
        stop_after_s: float = 120.0,
    ) -> None:
        self.state_file = state_file
        self.startup_grace_s = startup_grace_s
        self.poll_share = poll_share
        self.stale_after_s = stale_after_s
        self.lag_window = lag_window
        self.stop_after_s = stop_after_s
        self.started_at = time.time()
        self._windows: dict[str, LagWindow] = {}
        self._lock = threading.Lock()
        self._own_namespace = pid_namespace()

    def state(self) -> dict[str, Any] | None:
        return read_json(self.state_file)

    def _pid_check(self, state: dict[str, Any] | None) -> Callable[[int], bool] | None:
        """The pid check, when the worker's pid means something here (one pid namespace)."""
        same = state is not None and state.get("pid_namespace") == self._own_namespace
        return _pid_alive if same else None

    def liveness(self, state: dict[str, Any] | None) -> assessment.Verdict:
        return assessment.liveness(
            state,
            time.time(),
            started_at=self.started_at,
            startup_grace_s=self.startup_grace_s,
            poll_share=self.poll_share,
            pid_alive=self._pid_check(state),
        )

    def readiness(self, state: dict[str, Any] | None) -> assessment.Verdict:
        return assessment.readiness(
            state, time.time(), stale_after_s=self.stale_after_s, pid_alive=self._pid_check(state)
        )

    def sample(self, state: dict[str, Any] | None) -> dict[str, Status]:
        """Feed each partition's lag window from ``state``; return every partition's status."""
        with self._lock:
            if state is not None:
                at = float(state.get("written_at", time.time()))
                for key, part in state.get("partitions", {}).items():
                    end, committed = part.get("log_end"), part.get("committed")
                    # Nothing committed by this worker yet (a worker restarted on a caught-up
                    # group commits nothing): no sample, as its lag metric has none. Read as
                    # 0, its lag was the whole log and never moved: STALL, then STOP.
                    if end is None or committed is None:
                        continue
                    window = self._windows.setdefault(key, LagWindow(self.lag_window))
                    window.add(Sample(at, committed, end))
                for gone in set(self._windows) - set(state.get("partitions", {})):
                    del self._windows[gone]
            return {k: w.judge(self.stop_after_s) for k, w in self._windows.items()}

    def judge(self) -> tuple[View, assessment.Verdict, assessment.Verdict]:
        """One reading of the state file, judged once: the view and both verdicts."""
        state = self.state()
        fresh = (
            state is not None
            and not state.get("stopped")
            and (time.time() - float(state.get("written_at", 0.0)) <= self.stale_after_s)
        )
        live, ready = self.liveness(state), self.readiness(state)
        return View(state, fresh, live.ok, ready.ok, self.sample(state)), live, ready

    def view(self) -> View:
        return self.judge()[0]

    def run_sampler(self, stop: threading.Event, every_s: float = 1.0) -> None:
        while not stop.wait(every_s):
            self.sample(self.state())


class MetricsPage:
    """``/metrics``' body: rendered by one thread at a time, reused for ``max_age_s``."""

    def __init__(self, registry: CollectorRegistry, max_age_s: float = 1.0) -> None:
        self.registry = registry
        self.max_age_s = max_age_s
        self._lock = threading.Lock()
        self._body, self._at = b"", -float("inf")

    def body(self) -> bytes:
        with self._lock:
            if time.monotonic() - self._at >= self.max_age_s:
                self._body = generate_latest(self.registry)
                self._at = time.monotonic()
            return self._body


def make_handler(sidecar: Sidecar, page: MetricsPage) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "kafleet-sidecar"
        protocol_version = "HTTP/1.1"  # every answer says its length: connections can be kept

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s " + format, self.address_string(), *args)

        def _send(self, code: int, body: bytes, content_type: str = "text/plain") -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            path = urlparse(self.path).path
            if path in ("/healthz", "/readyz"):
                state = sidecar.state()
                verdict = (
                    sidecar.liveness(state) if path == "/healthz" else sidecar.readiness(state)
                )
                self._send(200 if verdict.ok else 503, verdict.body().encode())
            elif path == "/metrics":
                self._send(200, page.body(), CONTENT_TYPE_LATEST)
            elif path == "/status":
                view, live, ready = sidecar.judge()
                body = {
                    "healthy": view.healthy,
                    "ready": view.ready,
                    "fresh": view.fresh,
                    "liveness": live.reasons,
                    "readiness": ready.reasons,
                    "lag_status": view.lag_status,
                    "worker": view.state,
                }
                self._send(200, json.dumps(body, indent=2).encode(), "application/json")
            else:
                self._send(404, b"not found: try /healthz /readyz /metrics /status\n")

        def do_POST(self) -> None:
            self.send_response(405)
            self.send_header("Allow", "GET")
            body = b"only GET: tune through the ConsumerGroup (its ConfigMap), not here\n"
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


def serve(
    sidecar: Sidecar,
    host: str,
    port: int,
    *,
    per_partition: bool = True,
    workers: int = 4,
    timeout_s: float = 5.0,
) -> http_serving.BoundedHTTPServer:
    """Start serving in a background thread; returns the server (``shutdown()`` to stop)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StateCollector(sidecar.view, per_partition=per_partition))
    handler = make_handler(sidecar, MetricsPage(registry))
    server = http_serving.listen(
        host, port, handler, workers=workers, queued=4 * workers, timeout_s=timeout_s
    )
    threading.Thread(target=server.serve_forever, name="kafleet-sidecar-http", daemon=True).start()
    return server
