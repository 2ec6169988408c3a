"""``kafleet sidecar``: the second container of every worker pod, telling the truth about it.

Owns: the HTTP server (``/healthz``, ``/readyz``, ``/metrics``, ``/status``, ``POST /tune``),
reading the worker's state file (see ``state_file.py`` for why a file), feeding each partition's
lag window every second, and the command line. A separate process, so it answers when the
worker hangs, crashes or has not started. The judgements are pure functions elsewhere:
``assessment.py`` (live, ready), ``lag.py`` (Burrow-style status), ``metrics.py``.

- ``GET /healthz``: 200 or 503, a plain-text body saying which check fails and since when.
- ``GET /readyz``: 200 or 503 with the reason.
- ``GET /metrics``: Prometheus text, every name ``kafleet_*``.
- ``GET /status``: JSON: the worker's state, both verdicts and each partition's lag status.
- ``POST /tune?max_poll_records=N&concurrency=M``: the worker applies them live (202).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

from kafleet import assessment
from kafleet.lag import LagWindow, Sample, Status
from kafleet.metrics import StateCollector, View
from kafleet.state_file import pid_namespace, read_json, write_tuning

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
                    if end is None:
                        continue
                    window = self._windows.setdefault(key, LagWindow(self.lag_window))
                    window.add(Sample(at, committed if committed is not None else 0, end))
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


def make_handler(sidecar: Sidecar, registry: CollectorRegistry) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "kafleet-sidecar"

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
                self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
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
            url = urlparse(self.path)
            if url.path != "/tune":
                self._send(404, b"not found: POST /tune?max_poll_records=N&concurrency=M\n")
                return
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            try:
                values = {k: int(v) for k, v in query.items()}
                request_id = write_tuning(sidecar.state_file, **values)
            except ValueError as exc:
                self._send(400, f"{exc}\n".encode())
                return
            body = json.dumps({"id": request_id, "requested": values}).encode()
            self._send(202, body, "application/json")

    return Handler


def serve(sidecar: Sidecar, host: str, port: int) -> ThreadingHTTPServer:
    """Start serving in a background thread; returns the server (``shutdown()`` to stop)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StateCollector(sidecar.view))
    server = ThreadingHTTPServer((host, port), make_handler(sidecar, registry))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="kafleet-sidecar-http", daemon=True).start()
    return server


def add_arguments(parser: argparse.ArgumentParser) -> None:
    env = os.environ.get
    parser.add_argument(
        "--state-file",
        type=Path,
        default=Path(env("KAFLEET_STATE_FILE", "/var/run/kafleet/state.json")),
        help="the worker's state_file",
    )
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=9400)
    parser.add_argument(
        "--startup-grace-s",
        type=float,
        default=60.0,
        help="healthy without any state for this long after start",
    )
    parser.add_argument(
        "--poll-share",
        type=float,
        default=0.5,
        help="unhealthy after this share of max_poll_interval_ms without a poll",
    )
    parser.add_argument(
        "--stale-after-s",
        type=float,
        default=10.0,
        help="not ready when the state file is older than this",
    )
    parser.add_argument(
        "--lag-window",
        type=int,
        default=10,
        help="samples (one a second) per partition for the lag status",
    )
    parser.add_argument(
        "--stop-after-s",
        type=float,
        default=120.0,
        help="lag status STOP after this long with lag and no commit",
    )


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    sidecar = Sidecar(
        args.state_file,
        startup_grace_s=args.startup_grace_s,
        poll_share=args.poll_share,
        stale_after_s=args.stale_after_s,
        lag_window=args.lag_window,
        stop_after_s=args.stop_after_s,
    )
    server = serve(sidecar, args.host, args.port)
    log.info("serving %s on %s:%d", args.state_file, args.host, server.server_address[1])
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    sidecar.run_sampler(stop)
    server.shutdown()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kafleet sidecar")
    add_arguments(parser)
    return run(parser.parse_args(argv))
