"""``kafleet worker``: run a handler over a topic as a long-lived process.

Owns: the worker's command-line flags (generated from ``ConsumerConfig``'s fields, so the
config file, the ``KAFLEET_*`` variables and the flags always have the same names), importing
the handler (``module:function``), signals (SIGTERM or SIGINT: stop intake, drain within
``shutdown_grace_s``, commit, leave the group, exit 0; another signal half a second or more
later: exit 130 at once; SIGUSR1: every thread's stack to stderr, the process goes on, for a
worker that seems stuck), the config-file watch for live tuning, and ending on a configuration
mistake, wherever it is found (the file, the environment, the flags, the handler's import, the
consumer's checks at start): the message naming the field, exit code 2, no traceback. Does not
own any consumer behaviour (``consumer.py``).
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import math
import os
import signal
import sys
import time
import types
import typing
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from kafleet.cli.live_config import ConfigWatcher
from kafleet.config.doc import leaf_fields
from kafleet.config.imports import import_reference
from kafleet.config.loading import load_config
from kafleet.consumer import ParallelConsumer
from kafleet.engine.handlers import Handler
from kafleet.errors import ConfigError, FieldProblem
from kafleet.share.share_consumer import ShareConsumer

log = logging.getLogger("kafleet.worker")

# A signal repeated within this many seconds of the first is the same request, not a second
# one: GNU timeout signals the worker and then its process group, and a shell may pass one on.
SAME_REQUEST_S = 0.5


def _scalar_fields() -> Iterator[tuple[str, str]]:
    """(dotted field name, help) for every field a flag may set."""
    for dotted, info in leaf_fields():
        if typing.get_origin(info.annotation) is dict or "SecretStr" in str(info.annotation):
            # Mappings (kafka, spark.conf) come from the file or KAFLEET_* (and --kafka P=V);
            # no flags for secrets: a command line is visible to every process on the host.
            continue
        yield dotted, info.description or ""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        help="YAML file of ConsumerConfig fields; "
        "watched: max_poll_records and concurrency apply live",
    )
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING"])
    group = parser.add_argument_group("configuration fields (override the file and KAFLEET_*)")
    for dotted, help_text in _scalar_fields():
        flag = "--" + dotted.replace("_", "-")
        group.add_argument(flag, dest=f"field:{dotted}", metavar="VALUE", help=help_text)
    group.add_argument(
        "--kafka",
        action="append",
        default=[],
        metavar="PROPERTY=VALUE",
        help="a librdkafka property, passed through (repeatable)",
    )


def overrides_from(args: argparse.Namespace) -> dict[str, Any]:
    """The flags that were given, as a nested mapping of field values."""
    out: dict[str, Any] = {}
    for dest, value in vars(args).items():
        if not dest.startswith("field:") or value is None:
            continue
        *parents, leaf = dest.removeprefix("field:").split(".")
        node = out
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = value
    for item in args.kafka:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError([FieldProblem("kafka", f"expected PROPERTY=VALUE, got {item!r}")])
        out.setdefault("kafka", {})[key] = value
    return out


def import_handler(reference: str) -> Handler:
    """``package.module:function`` -> the handler (the working directory is importable)."""
    return import_reference(reference, "handler")


def _start(args: argparse.Namespace) -> tuple[ParallelConsumer | ShareConsumer, dict[str, Any]]:
    """Load, check and start: every ``ConfigError`` found on the way comes out of here."""
    if args.config is not None and not args.config.is_file():
        raise ConfigError([FieldProblem("--config", f"no such file: {args.config}")])
    overrides = overrides_from(args)
    config = load_config(args.config, overrides)
    if config.handler is None:
        raise ConfigError([FieldProblem("handler", "required: module:function")])
    handler = import_handler(config.handler)
    log.info("starting with:\n%s", config)
    if config.group_type == "share":
        return ShareConsumer(config, handler).start(), overrides
    return ParallelConsumer(config, handler).start(), overrides


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1`: where it is stuck
    try:  # a mistake ends the same way wherever it is found: named, exit 2, no traceback
        consumer, overrides = _start(args)
    except ConfigError as exc:
        if exc.source == "configuration" and args.config is not None:  # found after loading
            exc = ConfigError(exc.problems, f"configuration ({args.config})")
        print(f"kafleet worker: {exc}", file=sys.stderr)
        return 2
    config = consumer.config
    watcher = (
        ConfigWatcher(
            args.config,
            config,
            lambda live: consumer.tune(**live),
            overrides,
            stats=consumer.stats,
        ).start()
        if args.config
        else None
    )
    handled_at: float | None = None  # when the first signal's stop was asked

    def on_signal(signum: int, _frame: types.FrameType | None) -> None:
        nonlocal handled_at
        if handled_at is None:
            handled_at = math.inf  # one arriving while this one is handled is the same request
            try:
                log.info(
                    "%s: draining for up to %.0f s, then committing and leaving the group "
                    "(another signal, %.1f s or more later, exits at once)",
                    signal.Signals(signum).name,
                    config.shutdown_grace_s,
                    SAME_REQUEST_S,
                )
                consumer.stop()
            finally:
                handled_at = time.monotonic()
        elif time.monotonic() - handled_at < SAME_REQUEST_S:
            log.info("%s again at once: the same request", signal.Signals(signum).name)
        else:
            log.warning("second %s: exiting at once", signal.Signals(signum).name)
            os._exit(130)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while not consumer.wait(timeout=0.5):
        pass
    if watcher is not None:
        watcher.stop()
    if isinstance(consumer.error, ConfigError):
        print(f"kafleet worker: {consumer.error}", file=sys.stderr)
        return 2
    if consumer.error is not None:
        log.error("stopped on an error: %s", consumer.error)
        return 1
    log.info("stopped cleanly: %d records processed", consumer.stats.records_processed)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kafleet worker")
    add_arguments(parser)
    return run(parser.parse_args(argv))
