"""B11: a fleet through a rolling bounce and broker kills, on three brokers: kafleet beside the
plain confluent-kafka loop, and which session timeout to run.

A cluster of three brokers of its own (``tests/infra/kafka_cluster.py``), one topic of 6
partitions replicated three times, an idempotent ``acks=all`` producer at 200 records/s, and a
handler of 5 ms. Three groups read the topic side by side, each as two processes: kafleet with
the classic protocol (session 30 s), kafleet with KIP-848's (the broker's session, 30 s on the
test cluster), and the plain poll-then-process loop (``plain_loop.py``, session 30 s, librdkafka's
default eager assignors). The groups are chosen to share one coordinator, so each fault hits
all three alike. In turn: a rolling bounce (each broker SIGTERMed and started, the next once
every partition is in sync again), a leader of the topic SIGKILLed for 20 s (not the
coordinator), the coordinator SIGKILLed for 20 s. Then kafleet alone at four session timeouts
(6, 10, 30, 45 s) through one more coordinator kill: what the recommendation stands on.

For each fault and group, from the handlers' receipts and the producer's acknowledgements
(``tests/faults/delivery.py``): records/s handled from the fault's start to 10 s after its end,
over the rate in the 10 s before; the longest time nothing was handled (and the producer's
own longest quiet time: an idempotent producer stalls every partition while a leader moves);
how long after the fault's start records again waited under 1 s ("settled"); records handled
twice within the window; records lost (over the whole run).
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from bench.harness import Context, Table
from tests.faults.delivery import Delivery, SteadyProducer, read_receipts
from tests.infra import kafka_cluster, processes
from tests.infra.kafka import CACHE
from tests.infra.kafka_cluster import KafkaCluster

PARTITIONS = 6
RATE = 200.0
DELAY_S = 0.005
DOWN_S = 20
AFTER_S = 10
REPO = Path(__file__).resolve().parents[1]


class Group:
    """Two processes of one consumer kind, with their receipts in ``folder``."""

    def __init__(self, label: str, group: str, folder: Path, command: Callable[[int], list[str]]):
        self.label, self.group, self.folder = label, group, folder
        folder.mkdir(parents=True)
        env = {**os.environ, "PYTHONPATH": str(REPO), "KAFLEET_TEST_DELAY": str(DELAY_S)}
        self.procs = []
        for i in range(2):
            log = open(folder / f"process-{i}.log", "wb")  # noqa: SIM115
            env_i = {**env, "KAFLEET_TEST_OUT": str(folder / f"receipts-{i}.txt")}
            self.procs.append(
                subprocess.Popen(command(i), env=env_i, stdout=log, stderr=subprocess.STDOUT)
            )

    def delivery(self, producer: SteadyProducer) -> Delivery:
        return Delivery(dict(producer.acknowledged), read_receipts(self.folder))

    def wait_caught_up(self, producer: SteadyProducer, timeout: float = 180.0) -> None:
        """Until every acknowledged record has a receipt (or ``timeout``: what is missing
        then counts as lost)."""
        deadline = time.monotonic() + timeout
        while self.delivery(producer).lost and time.monotonic() < deadline:
            time.sleep(1.0)

    def stop(self) -> None:
        for proc in self.procs:
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()


def kafleet(
    label: str, cluster: KafkaCluster, topic: str, group: str, folder: Path, *flags: str
) -> Group:
    def command(i: int) -> list[str]:
        return [
            sys.executable, "-m", "kafleet", "worker",
            "--bootstrap-servers", cluster.bootstrap, "--group-id", group, "--topics", topic,
            "--handler", "tests.faults.receipts:handle", "--commit-interval-ms", "200",
            "--auto-offset-reset", "earliest", *flags,
        ]  # fmt: skip

    return Group(label, group, folder, command)


def plain(cluster: KafkaCluster, topic: str, group: str, folder: Path, session_ms: int) -> Group:
    def command(i: int) -> list[str]:
        receipts = str(folder / f"receipts-{i}.txt")
        return [
            sys.executable, "-m", "bench.plain_loop", cluster.bootstrap, group, topic, receipts,
            "--session-timeout-ms", str(session_ms),
        ]  # fmt: skip

    return Group(f"plain loop, session {session_ms // 1000} s", group, folder, command)


def same_coordinator(cluster: KafkaCluster, count: int) -> list[str]:
    """``count`` new group ids that one broker coordinates."""
    prefix = uuid.uuid4().hex[:6]
    names = (f"b11-{prefix}-{i}" for i in itertools.count())
    first = next(names)
    want = cluster.coordinator(first)
    found = [first]
    for name in names:
        if len(found) == count:
            return found
        if cluster.coordinator(name) == want:
            found.append(name)
    raise AssertionError("unreachable")


def duplicates_in(delivery: Delivery, start: float, end: float) -> int:
    seen: set[int] = set()
    twice = 0
    for r in delivery.receipts:
        if r.number in seen and start <= r.at <= end:
            twice += 1
        seen.add(r.number)
    return twice


def row(
    table: Table, fault: str, group: Group, delivery: Delivery, start: float, end: float
) -> None:
    steady = delivery.rate(start - 10, start)
    during = delivery.rate(start, end + AFTER_S)
    table.add(
        fault,
        group.label,
        steady,
        during / steady if steady else 0.0,
        delivery.longest_stall(start, end + AFTER_S),
        delivery.longest_quiet(start, end + AFTER_S),
        delivery.settled_after(start, end + AFTER_S),
        duplicates_in(delivery, start, end + AFTER_S),
        len(delivery.lost),
    )


def run(ctx: Context) -> Table:
    table = Table(
        "b11",
        f"three brokers: a rolling bounce and {DOWN_S} s broker kills, {PARTITIONS} partitions, "
        f"{RATE:g} records/s, {DELAY_S * 1000:g} ms a record, two processes a group",
        ["fault", "consumer", "steady/s", "during / steady", "longest stall s",
         "producer quiet s", "settled after s", "handled twice", "lost"],
    )  # fmt: skip
    runs = CACHE / "cluster-runs"
    processes.reap_stale_runs(runs)
    workdir = runs / f"session-{os.getpid()}"
    cluster = kafka_cluster.start_cluster(workdir)
    try:
        _side_by_side(ctx, cluster, workdir, table)
        _sessions(ctx, cluster, workdir, table)
    finally:
        cluster.stop()
    table.notes.append(
        "during / steady: records/s from the fault's start to 10 s after its end, over the 10 s "
        "before; settled: records again handled within 1 s of their acknowledgement"
    )
    return table


def _topic(cluster: KafkaCluster) -> str:
    from confluent_kafka.admin import NewTopic

    name = f"b11-{uuid.uuid4().hex[:8]}"
    cluster.admin().create_topics([NewTopic(name, PARTITIONS)])[name].result(timeout=30)
    time.sleep(2)
    return name


def _kill(cluster: KafkaCluster, node: int) -> tuple[float, float]:
    start = time.time()
    cluster.kill(node)
    time.sleep(DOWN_S)
    cluster.revive(node)
    cluster.wait_in_sync()
    return start, time.time()


def _side_by_side(ctx: Context, cluster: KafkaCluster, workdir: Path, table: Table) -> None:
    topic = _topic(cluster)
    names = same_coordinator(cluster, 3)
    coordinator = cluster.coordinator(names[0])
    session = ["--session-timeout-ms", "30000"]
    groups = [
        kafleet("kafleet, classic, session 30 s", cluster, topic, names[0],
                workdir / "kafleet-classic", "--group-protocol", "classic", *session),
        kafleet("kafleet, KIP-848", cluster, topic, names[1], workdir / "kafleet-consumer",
                "--group-protocol", "consumer"),
        plain(cluster, topic, names[2], workdir / "plain", 30_000),
    ]  # fmt: skip
    faults: list[tuple[str, float, float]] = []
    try:
        with SteadyProducer(cluster.bootstrap, topic, RATE) as producer:
            time.sleep(30)  # joins, a backlog caught up, and 10 s of steady state
            start = time.time()
            cluster.roll()
            faults.append(("rolling bounce", start, time.time()))
            time.sleep(AFTER_S + 10)
            leaders = {cluster.leader(topic, p) for p in range(PARTITIONS)} - {coordinator}
            faults.append(("leader killed", *_kill(cluster, min(leaders))))
            time.sleep(AFTER_S + 10)
            faults.append(("coordinator killed", *_kill(cluster, coordinator)))
            time.sleep(AFTER_S + 5)
        for group in groups:
            group.wait_caught_up(producer)
    finally:
        for group in groups:
            group.stop()
    for group in groups:
        delivery = group.delivery(producer)
        for fault, start, end in faults:
            row(table, fault, group, delivery, start, end)


def _sessions(ctx: Context, cluster: KafkaCluster, workdir: Path, table: Table) -> None:
    topic = _topic(cluster)
    sessions = (6, 10, 30, 45)
    names = same_coordinator(cluster, len(sessions))
    coordinator = cluster.coordinator(names[0])
    groups = [
        kafleet(f"kafleet, classic, session {s} s", cluster, topic, name,
                workdir / f"session-{s}", "--group-protocol", "classic",
                "--session-timeout-ms", str(s * 1000))
        for name, s in zip(names, sessions, strict=True)
    ]  # fmt: skip
    try:
        with SteadyProducer(cluster.bootstrap, topic, RATE) as producer:
            time.sleep(30)
            start, end = _kill(cluster, coordinator)
            time.sleep(AFTER_S + 5)
        for group in groups:
            group.wait_caught_up(producer)
    finally:
        for group in groups:
            group.stop()
    for group in groups:
        row(table, "coordinator killed", group, group.delivery(producer), start, end)
