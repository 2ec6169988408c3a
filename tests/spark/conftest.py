"""Fixtures for the Spark sink's tests: a real Spark Connect server, real worker processes
shipping to Spark, and reading a Delta table back."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.conftest import WorkerProcesses
from tests.infra import kafka as kafka_infra
from tests.infra import spark as spark_infra
from tests.infra.kafka import TestbedError


def _session_dir() -> Path:
    return kafka_infra.CACHE / "runs" / f"session-{os.getpid()}"


@pytest.fixture(scope="session")
def spark_connect(kafka_broker: kafka_infra.KafkaBroker) -> Iterator[spark_infra.ConnectServer]:
    """A Spark Connect server (``kafleet spark-connect``) for the whole test session."""
    try:
        server = spark_infra.start_connect(_session_dir() / "spark-connect")
    except TestbedError as exc:
        pytest.fail(f"the test bed could not start Spark Connect: {exc}", pytrace=False)
    yield server
    server.stop()


@pytest.fixture
def own_spark_connect(
    kafka_broker: kafka_infra.KafkaBroker, request: pytest.FixtureRequest
) -> Iterator[spark_infra.ConnectServer]:
    """A Spark Connect server of this test's own, which it may kill and start again."""
    workdir = _session_dir() / f"spark-connect-{request.node.name[:40]}"
    try:
        server = spark_infra.start_connect(workdir)
    except TestbedError as exc:
        pytest.fail(f"the test bed could not start Spark Connect: {exc}", pytrace=False)
    yield server
    server.stop()


@pytest.fixture
def table(tmp_path: Path) -> str:
    """Where a test's Delta table goes."""
    return str(tmp_path / "delta" / "records")


@pytest.fixture
def table_rows(spark: SparkSession) -> Callable[[str], list[tuple[str, int, int, int]]]:
    """``table_rows(path)``: (topic, partition, offset, number) of every row, read by Spark."""

    def read(path: str) -> list[tuple[str, int, int, int]]:
        if not any(Path(path, "_delta_log").glob("*.json")):
            return []  # no commit yet
        rows = (
            spark.read.format("delta")
            .load(path)
            .select("kafka_topic", "kafka_partition", "kafka_offset", "number")
            .collect()
        )
        return [(r[0], r[1], r[2], r[3]) for r in rows]

    return read


@pytest.fixture
def spark_worker(worker_processes: WorkerProcesses) -> Callable[..., subprocess.Popen[bytes]]:
    """``spark_worker(topic, group, table, *flags, delay=0.0, handler="number_row")``: a real
    ``kafleet worker`` running ``tests/spark/handlers.py:<handler>`` into the Delta table;
    killed after."""

    def start(
        topic: str,
        group: str,
        table: str,
        *flags: str,
        delay: float = 0.0,
        handler: str = "number_row",
    ) -> subprocess.Popen[bytes]:
        return worker_processes.start(
            topic,
            group,
            f"tests.spark.handlers:{handler}",
            [
                "--concurrency",
                "4",
                "--spark.table",
                table,
                "--spark.jars",
                str(spark_infra.JARS),
                "--spark.master",
                "local[2]",
                "--spark.batch.linger-ms",
                "200",
                *flags,
            ],
            {"KAFLEET_TEST_DELAY": str(delay)},
        )

    return start
