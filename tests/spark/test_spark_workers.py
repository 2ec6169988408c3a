"""Real ``kafleet worker`` processes shipping to real Spark, killed and cut off: at-least-once
loses nothing across a SIGKILL, exactly-once survives twenty SIGKILLs with every record in
the table once, and a Spark Connect outage pauses the worker and recovers without loss."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from kafleet.health import assessment
from tests.conftest import TopicFactory
from tests.infra.records import ProduceReport
from tests.infra.spark import ConnectServer
from tests.infra.waiting import wait_until

Rows = Callable[[str], list[tuple[str, int, int, int]]]
Committed = Callable[[str, str, int], dict[int, int]]


def kill(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def all_committed(committed: Committed, group: str, topic: str, report: ProduceReport) -> bool:
    return committed(group, topic, len(report.per_partition)) == dict(report.per_partition)


def test_at_least_once_loses_nothing_when_a_worker_running_spark_is_killed(
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    group_id: Callable[[], str],
    spark_worker: Callable[..., subprocess.Popen[bytes]],
    committed_offsets: Committed,
    table: str,
    table_rows: Rows,
) -> None:
    topic, group = topic_factory(partitions=3), group_id()
    report = produce(topic, 1_500)
    flags = ("--group-instance-id", "alo", "--session-timeout-ms", "6000")

    first = spark_worker(topic, group, table, *flags, delay=0.002)  # Spark in the worker
    wait_until(lambda: len(table_rows(table)) >= 300, 120, "300 rows before the kill", every=1)
    kill(first)
    spark_worker(topic, group, table, *flags)
    wait_until(
        lambda: all_committed(committed_offsets, group, topic, report),
        180,
        "all committed",
        every=0.5,
    )

    numbers = Counter(n for *_, n in table_rows(table))
    assert set(numbers) == set(range(1_500))  # nothing lost; a replay may repeat some


def test_exactly_once_survives_twenty_sigkills_with_every_record_in_the_table_once(
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    group_id: Callable[[], str],
    spark_worker: Callable[..., subprocess.Popen[bytes]],
    spark_connect: ConnectServer,
    committed_offsets: Committed,
    table: str,
    table_rows: Rows,
) -> None:
    """Kills land 0.5 to 4 s after a start, so across twenty they fall while handlers run,
    while batches are written (every 200 ms) and between a write and its commit (commits go
    out every second)."""
    topic, group = topic_factory(partitions=3), group_id()
    report = produce(topic, 4_000)
    flags = (
        "--guarantee",
        "exactly-once",
        "--spark.remote",
        spark_connect.url,
        "--commit-interval-ms",
        "1000",
        "--group-instance-id",
        "eos",  # static membership: a restart takes the partitions back
        "--session-timeout-ms",
        "6000",
    )
    rng = random.Random(20)
    kills = 0
    while kills < 20 and not all_committed(committed_offsets, group, topic, report):
        proc = spark_worker(topic, group, table, *flags, delay=0.004)
        time.sleep(rng.uniform(0.5, 4.0))
        kill(proc)
        kills += 1
    spark_worker(topic, group, table, *flags)
    wait_until(
        lambda: all_committed(committed_offsets, group, topic, report),
        240,
        "all committed",
        every=0.5,
    )

    rows = table_rows(table)
    copies = Counter((t, p, o) for t, p, o, _ in rows)
    assert kills == 20
    assert [c for c, n in copies.items() if n > 1] == []  # no record twice
    assert len(copies) == 4_000  # and none missing
    assert sorted(n for *_, n in rows) == list(range(4_000))


def test_a_table_written_to_the_log_end_whose_commit_was_lost_is_committed_by_the_next_owner(
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    group_id: Callable[[], str],
    spark_worker: Callable[..., subprocess.Popen[bytes]],
    spark_connect: ConnectServer,
    committed_offsets: Committed,
    table: str,
    table_rows: Rows,
) -> None:
    """The first worker writes every record and is killed before it commits (it commits only
    every ten minutes). The next owner resumes each partition after the table's output, at
    the log end, where no record will come: it commits that point all the same, or the group
    would show a lag that no consumer can ever work off."""
    topic, group = topic_factory(partitions=3), group_id()
    report = produce(topic, 600)
    flags = ("--guarantee", "exactly-once", "--spark.remote", spark_connect.url)
    flags += ("--group-instance-id", "eos-end", "--session-timeout-ms", "6000")

    first = spark_worker(topic, group, table, *flags, "--commit-interval-ms", "600000")
    wait_until(lambda: len(table_rows(table)) == 600, 180, "every record in the table", every=1)
    kill(first)
    assert not all_committed(committed_offsets, group, topic, report)  # the lost commit
    spark_worker(topic, group, table, *flags)
    wait_until(
        lambda: all_committed(committed_offsets, group, topic, report),
        120,
        "the table's output committed",
        every=0.5,
    )

    assert sorted(n for *_, n in table_rows(table)) == list(range(600))


def test_exactly_once_with_a_batch_handler_survives_sigkills_with_every_record_once(
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    group_id: Callable[[], str],
    spark_worker: Callable[..., subprocess.Popen[bytes]],
    spark_connect: ConnectServer,
    committed_offsets: Committed,
    table: str,
    table_rows: Rows,
) -> None:
    topic, group = topic_factory(partitions=3), group_id()
    report = produce(topic, 3_000)
    flags = (
        "--guarantee",
        "exactly-once",
        "--spark.remote",
        spark_connect.url,
        "--max-batch-records",
        "50",
        "--group-instance-id",
        "eos-batch",
        "--session-timeout-ms",
        "6000",
    )
    rng = random.Random(7)
    for _ in range(8):
        proc = spark_worker(topic, group, table, *flags, delay=0.004, handler="number_rows")
        time.sleep(rng.uniform(0.5, 4.0))
        kill(proc)
    spark_worker(topic, group, table, *flags, handler="number_rows")
    wait_until(
        lambda: all_committed(committed_offsets, group, topic, report),
        240,
        "all committed",
        every=0.5,
    )

    rows = table_rows(table)
    copies = Counter((t, p, o) for t, p, o, _ in rows)
    assert [c for c, n in copies.items() if n > 1] == []  # no record twice
    assert sorted(n for *_, n in rows) == list(range(3_000))  # and none missing


@pytest.mark.timeout(900)
def test_a_spark_connect_outage_pauses_the_worker_and_recovers_without_loss(
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    group_id: Callable[[], str],
    spark_worker: Callable[..., subprocess.Popen[bytes]],
    own_spark_connect: ConnectServer,
    committed_offsets: Committed,
    table: str,
    table_rows: Rows,
    tmp_path: Path,
) -> None:
    topic, group = topic_factory(partitions=2), group_id()
    report = produce(topic, 2_000)
    state_file = tmp_path / "state.json"
    spark_worker(
        topic,
        group,
        table,
        "--spark.remote",
        own_spark_connect.url,
        "--spark.idempotent",
        "true",  # a retried write whose answer was lost lands once
        "--spark.retry-backoff-ms",
        "200",
        "--spark.max-retry-backoff-ms",
        "1000",
        "--queue.max-records",
        "200",
        "--max-poll-records",
        "50",
        "--spark.batch.max-records",
        "100",
        "--state-file",
        str(state_file),
        "--state-interval-ms",
        "100",
        delay=0.002,
    )

    def state() -> dict[str, object]:
        try:
            loaded: dict[str, object] = json.loads(state_file.read_text())
        except (OSError, ValueError):
            return {}
        return loaded

    # The worker's first rows wait for its Spark Connect session: minutes on a busy machine.
    wait_until(lambda: len(table_rows(table)) >= 300, 240, "300 rows before the outage", every=1)
    own_spark_connect.kill()
    wait_until(lambda: (state().get("sink") or {}).get("failing_since"), 60, "the sink failing")
    before = committed_offsets(group, topic, 2)
    time.sleep(4)  # the outage lasts: records pile up to the bound, nothing is committed
    during = state()
    assert committed_offsets(group, topic, 2) == before
    parts = during["partitions"].values()  # type: ignore[union-attr]
    assert all(p["queued"] + p["held"] <= 200 + 50 for p in parts)
    assert any(p["paused"] for p in parts)
    verdict = assessment.readiness(during, time.time())
    assert not verdict.ok
    assert any("sink" in reason and "failed every write" in reason for reason in verdict.reasons)

    own_spark_connect.start()
    # A restarted Spark Connect server takes a minute or more to answer on a busy machine, and
    # each of the ~35 Delta writes left a few seconds.
    wait_until(
        lambda: all_committed(committed_offsets, group, topic, report),
        420,
        "all committed",
        every=0.5,
    )
    wait_until(lambda: not (state().get("sink") or {}).get("failing_since"), 30, "recovered")
    rows = table_rows(table)
    assert sorted(n for *_, n in rows) == list(range(2_000))  # idempotent retries: no repeats
