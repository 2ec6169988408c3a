"""``kafleet sidecar``'s command line: its flags, and the process from start to stop.

Owns: the flags with their defaults (some from the pod's environment: ``KAFLEET_STATE_FILE``,
``KAFLEET_SIDECAR_HOST``, ``KAFLEET_SIDECAR_PARTITION_METRICS``), starting the server on them,
running the lag sampler (``Sidecar.run_sampler``) until SIGTERM or SIGINT, then stopping the
server. Its own parser, so ``kafleet sidecar`` loads no pydantic or librdkafka (``cli/main.py``).

Does not own what is served or how it is judged (``server.py``), nor the server's bounds and
socket (``http_serving.py``).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from collections.abc import Sequence
from pathlib import Path

from kafleet.sidecar import http_serving
from kafleet.sidecar.server import Sidecar, serve

log = logging.getLogger("kafleet.sidecar")


def _on_off(text: str) -> bool:
    if text.lower() in ("on", "true", "1", "yes"):
        return True
    if text.lower() in ("off", "false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"on or off, not {text!r}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    env = os.environ.get
    parser.add_argument(
        "--state-file",
        type=Path,
        default=Path(env("KAFLEET_STATE_FILE", "/var/run/kafleet/state.json")),
        help="the worker's state_file",
    )
    parser.add_argument(
        "--host",
        default=env("KAFLEET_SIDECAR_HOST", http_serving.DUAL_STACK),
        help="where to listen; the default :: takes IPv6 and IPv4 (0.0.0.0 where IPv6 is absent)",
    )
    parser.add_argument("--port", type=int, default=9400)
    parser.add_argument(
        "--partition-metrics",
        type=_on_off,
        default=_on_off(env("KAFLEET_SIDECAR_PARTITION_METRICS", "on")),
        help="on: the kafleet_partition_* families, 14 series a partition; off: only the "
        "group's aggregates (for topics of hundreds of partitions)",
    )
    parser.add_argument(
        "--http-workers",
        type=int,
        default=4,
        help="requests answered at once; 4 times as many wait, more are refused (503)",
    )
    parser.add_argument(
        "--http-timeout-s",
        type=float,
        default=5.0,
        help="a request (its reading and its answer) is cut off after this long",
    )
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
    server = serve(
        sidecar,
        args.host,
        args.port,
        per_partition=args.partition_metrics,
        workers=args.http_workers,
        timeout_s=args.http_timeout_s,
    )
    host, port = server.server_address[:2]
    log.info("serving %s on [%s]:%d", args.state_file, host, port)
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
