"""Fixtures of the fault tests: topics on the three-broker cluster, and real ``kafleet worker``
processes that write receipts (``receipts.py``) and their state files, run as users run them.

Every test here gets the cluster with all three nodes up (``cluster_intact``), and brings back
what it takes down.
"""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import NewTopic

from tests.conftest import WorkerProcesses, _unique
from tests.faults.delivery import Delivery, SteadyProducer, read_receipts
from tests.infra.kafka_cluster import KafkaCluster
from tests.infra.waiting import wait_until

HANDLER = "tests.faults.receipts:handle"


class Fleet:
    """The workers of one test, all of one group on one topic of the cluster."""

    def __init__(self, cluster: KafkaCluster, topic: str, group: str, folder: Path) -> None:
        self.cluster, self.topic, self.group, self.folder = cluster, topic, group, folder
        self._processes = WorkerProcesses(cluster.bootstrap, folder)
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: dict[str, Path] = {}

    def start(self, name: str, *flags: str, delay: float = 0.005) -> subprocess.Popen[bytes]:
        """A worker named ``name`` (its receipts, state and log files carry the name; a
        worker started again under a name appends to them)."""
        self.state_path(name).unlink(missing_ok=True)  # a killed worker's last word is stale
        proc = self._processes.start(
            self.topic,
            self.group,
            HANDLER,
            ["--state-file", str(self.state_path(name)), "--state-interval-ms", "200", *flags],
            {
                "KAFLEET_TEST_OUT": str(self.folder / f"receipts-{name}.txt"),
                "KAFLEET_TEST_DELAY": str(delay),
            },
        )
        self.workers[name] = proc
        self._logs[name] = self.folder / f"worker-{len(self._processes.started) - 1}.log"
        return proc

    def state_path(self, name: str) -> Path:
        return self.folder / f"state-{name}.json"

    def state(self, name: str) -> dict[str, Any]:
        try:
            return dict(json.loads(self.state_path(name).read_text()))
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    def assigned(self, name: str) -> list[str]:
        """The partitions ``name`` holds, as its state file last said (``topic[p]``)."""
        return list(self.state(name).get("assigned") or [])

    def counters(self, name: str) -> dict[str, int]:
        """Partitions assigned, revoked and lost so far, from ``name``'s state file."""
        state = self.state(name)
        keys = ("partitions_assigned_total", "partitions_revoked_total", "partitions_lost_total")
        return {key: int(state.get(key, 0)) for key in keys}

    def wait_assigned(self, partitions: int, timeout: float = 60.0) -> None:
        """Until the running workers hold ``partitions`` partitions between them, each at
        least one (the group has settled), and a second later still do."""

        def settled() -> bool:
            held = [len(self.assigned(n)) for n in self.running()]
            return sum(held) == partitions and min(held, default=0) > 0

        what = f"the workers of {self.group} to share its {partitions} partitions"
        wait_until(settled, timeout, what, every=0.2)
        time.sleep(1.0)
        wait_until(settled, timeout, what, every=0.2)

    def running(self) -> list[str]:
        return [name for name, proc in self.workers.items() if proc.poll() is None]

    def stop(self, name: str, timeout: float = 60.0) -> int:
        """SIGTERM (drain, commit, leave) and the exit code."""
        proc = self.workers[name]
        proc.send_signal(signal.SIGTERM)
        return proc.wait(timeout)

    def kill(self, name: str) -> None:
        proc = self.workers[name]
        proc.kill()
        proc.wait()

    def stop_all(self) -> dict[str, int]:
        running = self.running()
        for name in running:
            self.workers[name].send_signal(signal.SIGTERM)
        return {name: self.workers[name].wait(60) for name in running}

    def kill_all(self) -> None:
        self._processes.kill_all()

    def delivery(self, producer: SteadyProducer) -> Delivery:
        return Delivery(dict(producer.acknowledged), read_receipts(self.folder))

    def log(self, name: str) -> str:
        """The log of the latest process started as ``name``."""
        return self._logs[name].read_text(errors="replace")


FleetFactory = Callable[..., Fleet]


@pytest.fixture
def cluster_topic(
    cluster_intact: KafkaCluster, request: pytest.FixtureRequest
) -> Callable[[int], str]:
    """``cluster_topic(partitions)``: a topic of the cluster, replicated three times with
    ``min.insync.replicas`` 2 (the cluster's defaults), its leaders spread over the nodes."""
    counter = itertools.count()

    def create(partitions: int = 6) -> str:
        name = _unique(f"t{next(counter)}", request)
        admin = cluster_intact.admin()
        admin.create_topics([NewTopic(name, partitions)])[name].result(timeout=30)
        wait_until(
            lambda: all(cluster_intact.leader(name, p) >= 0 for p in range(partitions)),
            30,
            f"leaders for {name}'s partitions",
        )
        return name

    return create


@pytest.fixture
def fleet(
    cluster_intact: KafkaCluster, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[FleetFactory]:
    """``fleet(topic)``: a group of workers (none started) on ``topic``; killed after."""
    made: list[Fleet] = []

    def make(topic: str) -> Fleet:
        folder = tmp_path / f"fleet-{len(made)}"
        folder.mkdir()
        made.append(Fleet(cluster_intact, topic, _unique("g", request), folder))
        return made[-1]

    yield make
    for each in made:
        each.kill_all()
