"""Every example that users copy runs, against the session's real broker."""

from __future__ import annotations

import importlib
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

from tests.conftest import TopicFactory
from tests.infra import spark as spark_infra
from tests.infra.waiting import wait_until

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_roundtrip_example_prints_every_record_it_produced(kafka: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(EXAMPLES / "roundtrip.py"),
            "--bootstrap-servers",
            kafka,
            "--topic",
            "examples-roundtrip",
            "--count",
            "7",
            "--log",
            str(tmp_path / "roundtrip.log"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "produced 7 records to examples-roundtrip (3 partitions)"
    assert sum('"order":' in line for line in lines) == 7
    assert lines[-1] == "consumed 7 of 7 records back"
    assert done.stderr == ""  # the client's retries, if any, are in its log


@pytest.mark.timeout(480)
def test_demo_bills_every_order_in_parallel_and_queries_them_back_from_delta(
    kafka: str, tmp_path: Path
) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(EXAMPLES / "demo.py"),
            "--bootstrap-servers",
            kafka,
            "--count",
            "80",
            "--jars",
            str(spark_infra.delta_jars()[0].parent),
            "--table",
            str(tmp_path / "billed"),
            "--log",
            str(tmp_path / "demo.log"),
        ],
        capture_output=True,
        text=True,
        # 40 s alone; CI runs it beside the real node and two three-broker workers' Sparks,
        # where it took over 180 s twice (a wait, not a measurement: B5 measures speed)
        timeout=420,
        check=False,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    assert "billed 80 of 80 orders" in done.stdout
    assert "healthy: True" in done.stdout
    assert "commits: 0," not in done.stdout  # the close commits what was billed
    assert "rows of this run in the table: 80 of 80" in done.stdout
    assert "ada " in done.stdout.split("by Spark:")[1]  # counted per customer, read back
    # Its own story only: Spark's start-up and the clients' retries are in its log.
    assert done.stderr == ""
    assert "log4j" not in done.stdout
    assert "log4j" in (tmp_path / "demo.log").read_text()
    assert (
        done.stdout.splitlines()[-1]
        == f"the log of Kafka's client, Spark and kafleet: {tmp_path / 'demo.log'}"
    )


def test_the_example_worker_config_bills_orders_and_parks_a_bad_one(
    kafka: str, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    topic = topic_factory(partitions=2)
    dead = topic_factory(partitions=1)
    producer = Producer({"bootstrap.servers": kafka})
    for i in range(20):
        producer.produce(
            topic,
            key=f"c{i % 3}",
            value=json.dumps({"order": i, "customer": f"c{i % 3}", "amount": i}),
        )
    producer.produce(topic, key="c0", value=b"not json")
    producer.flush(30)
    log = tmp_path / "worker.log"

    with open(log, "wb") as out:
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kafleet",
                "worker",
                "--config",
                "worker.yaml",
                "--bootstrap-servers",
                kafka,
                "--topics",
                topic,
                "--group-id",
                f"g-{topic}",
                "--dead-letter-topic",
                dead,
                "--retry.initial-backoff-ms",
                "10",
            ],
            cwd=EXAMPLES,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_until(lambda: log.read_text().count("billed order") >= 20, 60, "20 billed")
            wait_until(lambda: f"sent to {dead}" in log.read_text(), 60, "the bad record parked")
        finally:
            worker.send_signal(signal.SIGTERM)
            code = worker.wait(timeout=60)

    assert code == 0, log.read_text()[-3000:]
    assert "stopped cleanly" in log.read_text()


class _LeaderComingUp:
    """A consumer whose partition answers NOT_LEADER_FOR_PARTITION twice, as a new topic's
    partition does while its broker takes the lead, then its end offset."""

    def __init__(self) -> None:
        self.asked = 0

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        self.asked += 1
        if self.asked <= 2:
            raise KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))
        return 0, 41


def test_the_roundtrip_example_waits_out_a_partition_whose_leader_is_still_coming_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    sys.modules.pop("roundtrip", None)
    roundtrip = importlib.import_module("roundtrip")
    consumer = _LeaderComingUp()

    assert roundtrip.end_offsets(consumer, "t", [0]) == {0: 41}
    assert consumer.asked == 3
