"""A real Spark for the tests: the pip-installed pyspark, local, with Delta Lake's jars.

Owns: fetching Delta's two jars (``delta-spark_4.2_2.13`` and ``delta-storage``, without their
transitive dependencies, which would put a second Jackson, Hadoop and Scala on Spark's class
path) from Maven Central with ``mvn`` into ``.cache/spark/delta-<version>/``, and building a
local ``SparkSession`` with Delta's SQL extension and catalog, sized for a 2-core machine.
Also starts real Spark Connect servers (``kafleet spark-connect``, on a free port, its
scratch space in the test run's folder so a killed session's server is reaped) for the tests
of remote sinks and Spark outages. Does not own any job: kafleet's Spark sink builds its own
sessions.

    python -m tests.infra.spark jars   # what `make test` runs first; prints the jar folder
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.infra import processes
from tests.infra.kafka import REPO_ROOT, TestbedError
from tests.infra.ports import free_port

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DELTA_VERSION = "4.4.0"
POM = Path(__file__).with_name("spark-pom.xml")
JARS = REPO_ROOT / ".cache" / "spark" / f"delta-{DELTA_VERSION}"
STREAMING_POM = REPO_ROOT / "bench" / "streaming-pom.xml"
STREAMING_JARS = REPO_ROOT / ".cache" / "spark" / "streaming-kafka-4.2.0"


def spark_fields(table: str, **more: Any) -> dict[str, Any]:
    """A consumer config's ``spark`` section for a test: a local Spark of 2 cores writing
    ``table`` with Delta's jars; ``more`` adds or replaces its fields (``batch`` defaults to a
    200 ms linger)."""
    batch = more.pop("batch", {"linger_ms": 200})
    return {
        "spark": {
            "table": table,
            "master": "local[2]",
            "jars": [str(JARS)],
            "batch": batch,
            **more,
        }
    }


def delta_jars() -> list[Path]:
    """Delta's jars, fetched once."""
    return _fetch(POM, JARS, [f"-Ddelta.version={DELTA_VERSION}", "-DexcludeTransitive=true"])


def streaming_kafka_jars() -> list[Path]:
    """Structured Streaming's Kafka source (benchmark B5), fetched once."""
    return _fetch(STREAMING_POM, STREAMING_JARS, [])


def _fetch(pom: Path, folder: Path, options: list[str]) -> list[Path]:
    marker = folder / ".complete"
    if not marker.exists():
        mvn = shutil.which("mvn")
        if mvn is None:
            raise TestbedError("'mvn' was not found on PATH; Maven fetches Spark's extra jars")
        tmp = folder.with_name(folder.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        done = subprocess.run(
            [
                mvn,
                "-q",
                "-B",
                "-f",
                str(pom),
                "dependency:copy-dependencies",
                f"-DoutputDirectory={tmp}",
                *options,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise TestbedError(
                f"mvn could not fetch the jars of {pom.name}:\n{done.stdout[-3000:]}"
            )
        shutil.rmtree(folder, ignore_errors=True)
        tmp.rename(folder)
        marker.write_text(pom.name + "\n")
    return sorted(folder.glob("*.jar"))


def local_session(app: str = "kafleet-tests", extra_jars: Sequence[Path] = ()) -> SparkSession:
    """A local Spark session with Delta, small enough for a 2-core machine."""
    from pyspark.sql import SparkSession

    if shutil.which("java") is None:
        raise TestbedError("'java' was not found on PATH; Spark needs Java 17 or newer")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Python UDFs: this venv's Python
    return (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.jars", ",".join(str(j) for j in [*delta_jars(), *extra_jars]))
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config(
            "spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"
        )
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.databricks.delta.snapshotPartitions", "2")  # Delta's default is 50
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )


@dataclass
class ConnectServer:
    """A Spark Connect server with Delta Lake, started by :func:`start_connect`."""

    port: int
    workdir: Path
    pid: int | None = None

    @property
    def url(self) -> str:
        return f"sc://localhost:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "spark-connect.log"

    def start(self, timeout: float = 120.0) -> ConnectServer:
        """Start (or start again, on the same port) and wait until it takes connections."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable,
            "-m",
            "kafleet",
            "spark-connect",
            "--port",
            str(self.port),
            "--master",
            "local[2]",
            "--jars",
            str(JARS),
            "--conf",
            f"spark.local.dir={self.workdir / 'scratch'}",  # names the run folder: reapable
            "--conf",
            "spark.driver.memory=1g",
            "--conf",
            "spark.sql.shuffle.partitions=2",
            "--conf",
            "spark.databricks.delta.snapshotPartitions=2",
        ]
        delta_jars()
        self.pid = processes.spawn(cmd, self.log_path)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not processes.alive(self.pid):
                raise TestbedError(f"Spark Connect exited; see {self.log_path}")
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.2)
        raise TestbedError(f"Spark Connect did not listen within {timeout:g} s: {self.log_path}")

    def kill(self) -> None:
        processes.kill(self.pid)
        self.pid = None

    def stop(self) -> None:
        processes.stop(self.pid, timeout=15)
        self.pid = None


def start_connect(workdir: Path) -> ConnectServer:
    return ConnectServer(free_port(), workdir).start()


if __name__ == "__main__":
    if sys.argv[1:] != ["jars"]:
        print("usage: python -m tests.infra.spark jars", file=sys.stderr)
        sys.exit(2)
    try:
        print(delta_jars()[0].parent)
    except TestbedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
