"""The ``kafleet`` command line.

Owns: argument parsing, dispatch to subcommands, and the exit status of a configuration
mistake that reaches it (``ConfigError``: its message, exit code 2, no traceback; ``kafleet
worker`` ends its own mistakes the same way). Does not own any behaviour of its own: each
subcommand is a thin shim over the module that does the work (the worker, the sidecar, the
operator), so that everything it runs can also be called from Python.
"""

from __future__ import annotations

import argparse
import importlib.util
import platform
import sys
from collections.abc import Sequence
from pathlib import Path

import kafleet
from kafleet.sidecar import command as sidecar


def _version_text() -> str:
    import confluent_kafka

    client = confluent_kafka.__version__
    librdkafka, _ = confluent_kafka.libversion()
    return (
        f"kafleet {kafleet.__version__} (confluent-kafka {client}, librdkafka {librdkafka}, "
        f"Python {platform.python_version()})"
    )


# What ``kafleet operator`` needs beyond the library: the [operator] extra of pyproject.toml.
OPERATOR_EXTRA = ("kopf", "kubernetes")


def _operator_missing() -> list[str]:
    """The [operator] extra's packages that are not installed (looked up, not imported)."""
    return [name for name in OPERATOR_EXTRA if importlib.util.find_spec(name) is None]


def _operator_not_installed(missing: Sequence[str]) -> str:
    needs = " and ".join(missing)
    are = "is" if len(missing) == 1 else "are"
    return f"the operator needs {needs}, which {are} not installed: pip install 'kafleet[operator]'"


def build_parser() -> argparse.ArgumentParser:
    from kafleet.cli import worker
    from kafleet.spark import connect as spark_connect

    parser = argparse.ArgumentParser(
        prog="kafleet",
        description="Run Kafka consumers that do slow, real work: in parallel, back-pressured, "
        "committing only what is done.",
    )
    parser.add_argument("--version", action="version", version=_version_text())
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    worker.add_arguments(
        commands.add_parser(
            "worker",
            help="consume topics with a handler, in parallel (see kafleet worker --help)",
            description="Run a handler over Kafka topics: polling at a fixed cadence, "
            "back-pressured per partition, committing only what is done.",
        )
    )
    sidecar.add_arguments(
        commands.add_parser(
            "sidecar",
            help="serve a worker's health, readiness and Prometheus metrics",
            description="The second container of a worker pod: /healthz /readyz /metrics "
            "/status, from the worker's state file.",
        )
    )
    spark_connect.add_arguments(
        commands.add_parser(
            "spark-connect",
            help="run a local Spark Connect server with Delta Lake (development, tests)",
            description="A Spark Connect server from the pip-installed pyspark, with Delta "
            "Lake: point spark.remote at sc://localhost:PORT.",
        )
    )
    jars = commands.add_parser(
        "share-jars",
        help="fetch Kafka's Java client for share groups (share.classpath) with mvn",
        description="Fetch kafka-clients and its runtime jars from Maven Central into DIR "
        "(once); then set share.classpath: DIR/*.",
    )
    jars.add_argument("dir", type=Path, metavar="DIR")
    missing = _operator_missing()
    operator = commands.add_parser(
        "operator",
        help="run the Kubernetes operator for ConsumerGroup resources (needs kafleet[operator])",
        description="Reconcile ConsumerGroup resources into worker fleets; scale and tune them."
        + (f" Not available here: {_operator_not_installed(missing)}." if missing else ""),
    )
    if missing:  # the [operator] extra is not installed: a message, never a traceback
        operator.set_defaults(unavailable=missing)
    else:
        from kafleet_operator import main as operator_main

        operator_main.add_arguments(operator)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["sidecar"]:  # its own parser: no pydantic, no librdkafka in its memory
        return sidecar.main(args_list[1:])
    from kafleet.errors import ConfigError

    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if getattr(args, "unavailable", None):  # before its flags, which are unknown without it
        parser.error(_operator_not_installed(args.unavailable))
    if unknown:  # what parse_args says
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return _dispatch(parser, args)
    except ConfigError as exc:  # the last net: a mistake is named, never a traceback
        print(f"kafleet {args.command}: {exc}", file=sys.stderr)
        return 2


def _dispatch(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from kafleet.cli import worker
    from kafleet.spark import connect as spark_connect

    if args.command == "worker":
        return worker.run(args)
    if args.command == "sidecar":
        return sidecar.run(args)
    if args.command == "spark-connect":
        return spark_connect.run(args)
    if args.command == "share-jars":
        from kafleet.share import jvm

        print(f"{jvm.fetch_jars(args.dir)}/*")
        return 0
    if args.command == "operator":
        from kafleet_operator import main as operator_main

        return operator_main.run(args)
    parser.error(f"unknown command {args.command!r}")  # exits with status 2
    return 2
