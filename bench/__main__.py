"""Run the benchmarks: ``python -m bench [--quick] [NAME ...]`` (names like ``b0``, ``b10``)."""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import time

import bench
from bench.harness import Context, machine
from tests.infra import kafka as kafka_infra
from tests.infra import processes


def discover() -> list[str]:
    return [path.stem for path in bench.modules()]


def _names(module: str, name: str) -> bool:
    """``b1`` names b1_overhead, not b10_share: a bare name is the number before the first
    ``_``; a longer one (``b1_over``) is a prefix of the module's name."""
    return module.split("_", 1)[0] == name if "_" not in name else module.startswith(name)


def _interrupted(signum: int, _frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one would cut the clean-up short
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "names", nargs="*", help="benchmarks to run: b0, b1, ... b10 (or a prefix such as b1_over)"
    )
    parser.add_argument("--quick", action="store_true", help="small workloads, to check they run")
    args = parser.parse_args()
    chosen = [m for m in discover() if not args.names or any(_names(m, n) for n in args.names)]
    if not chosen:
        print(f"no benchmark matches {args.names}; there are: {discover()}", file=sys.stderr)
        return 2

    # A SIGTERM (``timeout``, a CI job cancelled) unwinds like Ctrl-C: every benchmark's own
    # ``finally`` stops what it started (control planes, KEDA, operators, the broker), where
    # the default action left them running.
    signal.signal(signal.SIGTERM, _interrupted)
    # A broker folder per run: two benchmarks at once (B8 on the real node, B9 on kwok) must not
    # empty each other's; a killed run's folder and broker go at the next run's start.
    runs = kafka_infra.CACHE / "runs" / "bench-sessions"
    processes.reap_stale_runs(runs)
    workdir = runs / f"session-{os.getpid()}"
    started = time.monotonic()
    broker = kafka_infra.start_broker(workdir)
    print(
        f"broker {broker.version} up on {broker.bootstrap} in {time.monotonic() - started:.1f} s;"
        f" machine: {machine()}\n"
    )
    try:
        ctx = Context(broker.bootstrap, args.quick, broker.pods_bootstrap)
        for name in chosen:
            table = importlib.import_module(f"bench.{name}").run(ctx)
            print(table.render())
            print(f"  (saved to {table.save()})\n")
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
