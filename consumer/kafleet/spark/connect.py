"""``kafleet spark-connect``: a local Spark Connect server from the pip-installed pyspark.

Owns: the command line of a Spark Connect server with Delta Lake (``spark-submit --class
org.apache.spark.sql.connect.service.SparkConnectServer``, which pyspark ships without
``sbin/start-connect-server.sh``), its Delta and memory settings, and waiting until it takes
connections. For development, tests and the demo: workers point ``spark.remote`` at it
(``sc://localhost:15002``), as they would at a real cluster's Connect endpoint.

Does not own the jars (``make delta-jars`` fetches Delta's into ``.cache/spark``) nor any job.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from kafleet.errors import ConfigError, FieldProblem, SinkError

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}


def spark_submit() -> Path:
    """``spark-submit`` of the installed pyspark."""
    try:
        import pyspark
    except ImportError as exc:
        raise SinkError(
            "spark-connect", "pyspark is not installed: pip install 'kafleet[spark]'"
        ) from exc
    script = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    if not script.exists():
        raise SinkError("spark-connect", f"{script} is missing from the pyspark install")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise SinkError("spark-connect", "'java' was not found: Spark 4 needs Java 17 or newer")
    return script


def command(
    port: int, jars: list[str], conf: dict[str, str], master: str = "local[*]"
) -> list[str]:
    """The ``spark-submit`` command line of a Connect server with Delta Lake."""
    files = []
    for entry in jars:
        path = Path(entry)
        files.extend(sorted(path.glob("*.jar")) if path.is_dir() else [path])
    missing = [str(f) for f in files if not f.is_file()]
    if missing or not files:
        raise ConfigError(
            [FieldProblem("--jars", f"Delta's jars are needed: {missing or 'none given'}")]
        )
    settings = {
        **DELTA_CONF,
        "spark.connect.grpc.binding.port": str(port),
        "spark.ui.enabled": "false",
        **conf,
    }
    argv = [str(spark_submit()), "--master", master, "--class", SERVER_CLASS]
    argv += ["--jars", ",".join(str(f) for f in files)]
    for key, value in settings.items():
        argv += ["--conf", f"{key}={value}"]
    return [*argv, "spark-internal"]


def wait_until_listening(port: int, process: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SinkError(f"sc://localhost:{port}", f"the server exited ({process.returncode})")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise SinkError(f"sc://localhost:{port}", f"not listening after {timeout:g} s")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=15002, help="the gRPC port (15002)")
    parser.add_argument(
        "--jars",
        action="append",
        default=[],
        help="Delta's jars, files or folders (repeatable); `make delta-jars` fetches them",
    )
    parser.add_argument("--master", default="local[*]", help="the server's Spark master")
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark property"
    )


def run(args: argparse.Namespace) -> int:
    """Run the server in the foreground until it exits or this process is stopped."""
    try:
        conf = dict(item.split("=", 1) for item in args.conf)
        argv = command(args.port, args.jars, conf, args.master)
    except (ConfigError, SinkError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"Spark Connect on sc://localhost:{args.port}", file=sys.stderr, flush=True)
    os.execv(argv[0], argv)
    return 0  # not reached
