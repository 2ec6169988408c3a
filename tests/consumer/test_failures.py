"""Failures lose nothing: poison records, broker restarts, killed and stopped workers."""

from __future__ import annotations

import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from kafleet import ParallelConsumer, Record
from kafleet.cli.worker import SAME_REQUEST_S
from tests.conftest import ConfigFactory, TopicFactory
from tests.consumer.conftest import Journal
from tests.infra import kafka as kafka_infra
from tests.infra.records import ProduceReport, read_records, record_number
from tests.infra.waiting import wait_until

Start = Callable[..., ParallelConsumer]


def _poison(number: int) -> Callable[[Record], None]:
    def handle(record: Record) -> None:
        if record_number(record.value or b"") == number:
            raise ValueError(f"cannot bill record {number}")

    return handle


def _wait_logged(log: Path, line: str) -> None:
    wait_until(lambda: line in log.read_text(), 30, f"{line!r} in {log.name}", every=0.02)


def test_a_poison_record_goes_to_the_dead_letter_topic_with_headers_while_the_rest_flows(
    kafka: str,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    consumer_config: ConfigFactory,
    start_consumer: Start,
    journal: Journal,
    committed_offsets: Callable[[str, str, int], dict[int, int]],
    end_offsets: Callable[[str, int], dict[int, int]],
) -> None:
    topic = topic_factory(partitions=3)
    dead = topic_factory(partitions=1)
    produce(topic, 300)
    good = journal.handler()

    def handle(record: Record) -> None:
        _poison(42)(record)
        good(record)

    config = consumer_config(
        topic, dead_letter_topic=dead, retry={"max_attempts": 3, "initial_backoff_ms": 20}
    )
    consumer = start_consumer(config, handle)
    wait_until(lambda: journal.count() >= 299, 60, "every other record")
    wait_until(
        lambda: committed_offsets(config.group_id, topic, 3) == end_offsets(topic, 3),
        30,
        "commits past the poison record too",
    )

    assert 42 not in journal.numbers()
    [parked] = read_records(kafka, dead, 1)
    headers = dict(parked.headers())  # type: ignore[attr-defined]
    assert record_number(parked.value()) == 42  # type: ignore[attr-defined]
    assert headers["kafleet.error.type"] == b"builtins.ValueError"
    assert headers["kafleet.error.message"] == b"cannot bill record 42"
    assert headers["kafleet.attempts"] == b"3"
    assert headers["kafleet.original.topic"] == topic.encode()
    assert int(headers["kafleet.original.offset"]) >= 0
    snapshot = consumer.snapshot()
    assert snapshot["dead_lettered"] == 1
    assert snapshot["retries"] == 2


def test_the_stop_policy_stops_only_the_poison_records_partition_and_commits_before_it(
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    consumer_config: ConfigFactory,
    start_consumer: Start,
    journal: Journal,
    committed_offsets: Callable[[str, str, int], dict[int, int]],
    end_offsets: Callable[[str, int], dict[int, int]],
) -> None:
    topic = topic_factory(partitions=2)
    produce(topic, 10, partition=0)
    produce(topic, 10, partition=1, start=10)
    good = journal.handler()

    def handle(record: Record) -> None:
        _poison(4)(record)
        good(record)

    config = consumer_config(
        topic, on_failure="stop-partition", retry={"max_attempts": 2, "initial_backoff_ms": 10}
    )
    consumer = start_consumer(config, handle)
    wait_until(lambda: journal.count() >= 14, 30, "partition 1 and partition 0 up to the poison")
    wait_until(
        lambda: committed_offsets(config.group_id, topic, 2) == {0: 4, 1: 10},
        30,
        "commits up to the poison record and all of partition 1",
    )

    time.sleep(0.5)
    assert sorted(journal.numbers()) == [0, 1, 2, 3, *range(10, 20)]
    stopped = consumer.snapshot()["partitions"][f"{topic}[0]"]["stopped"]
    assert stopped is not None
    assert "cannot bill record 4" in stopped


def test_a_broker_restart_during_consumption_loses_nothing(
    kafka_broker: kafka_infra.KafkaBroker,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    consumer_config: ConfigFactory,
    start_consumer: Start,
    journal: Journal,
) -> None:
    topic = topic_factory(partitions=3)
    produce(topic, 3_000)
    start_consumer(consumer_config(topic, concurrency=3), journal.handler(delay=lambda r: 0.001))
    wait_until(lambda: journal.count() >= 500, 60, "500 records before the restart")

    kafka_broker.stop()
    time.sleep(2)
    kafka_broker.start()
    wait_until(lambda: len(journal.numbers()) >= 3_000, 120, "all 3,000 after the restart")

    assert sorted(journal.numbers()) == list(range(3_000))


def _finished(out: Path) -> Counter[int]:
    if not out.exists():
        return Counter()
    return Counter(int(line.split()[2]) for line in out.read_text().splitlines() if line)


def test_a_worker_killed_with_sigkill_and_restarted_loses_nothing(
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    group_id: Callable[[], str],
    worker: Callable[..., subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    topic, group, out = topic_factory(partitions=3), group_id(), tmp_path / "done.txt"
    produce(topic, 1_500)

    first = worker(topic, group, out, delay=0.002)
    wait_until(lambda: len(_finished(out)) >= 300, 60, "300 records before the kill")
    first.send_signal(signal.SIGKILL)
    first.wait()
    worker(topic, group, out, delay=0.0)
    wait_until(lambda: len(_finished(out)) >= 1_500, 120, "every record after the restart")

    assert sorted(_finished(out)) == list(range(1_500))


# GNU timeout signals the worker and then its process group: SIGTERM twice, microseconds apart.
@pytest.mark.parametrize("times", [1, 2], ids=["once", "twice within half a second"])
def test_sigterm_drains_commits_what_was_done_and_exits_zero(
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    group_id: Callable[[], str],
    worker: Callable[..., subprocess.Popen[bytes]],
    tmp_path: Path,
    committed_offsets: Callable[[str, str, int], dict[int, int]],
    times: int,
) -> None:
    topic, group, out = topic_factory(partitions=3), group_id(), tmp_path / "done.txt"
    produce(topic, 3_000)

    proc = worker(
        topic, group, out, "--queue.max-records", "20", "--max-poll-records", "10", delay=0.02
    )
    wait_until(lambda: len(_finished(out)) >= 100, 60, "100 records before SIGTERM")
    proc.send_signal(signal.SIGTERM)
    if times == 2:  # once the first is handled (two sent together may be seen as one)
        _wait_logged(tmp_path / "worker-0.log", "SIGTERM: draining")
        proc.send_signal(signal.SIGTERM)

    assert proc.wait(timeout=60) == 0
    done = [line.split() for line in out.read_text().splitlines()]
    assert len(done) < 3_000  # it stopped taking records
    assert len({n for _, _, n in done}) == len(done)
    per_partition = Counter(int(p) for p, _, _ in done)
    committed = committed_offsets(group, topic, 3)
    for partition, count in per_partition.items():
        assert committed[partition] == count  # everything done, and nothing more, committed


def test_a_second_sigint_a_second_after_the_first_exits_at_once_without_waiting_for_the_drain(
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    group_id: Callable[[], str],
    worker: Callable[..., subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    topic, group, out = topic_factory(partitions=3), group_id(), tmp_path / "done.txt"
    produce(topic, 300)

    # Three records in flight and the queues full of 3 s records: a drain of a minute or more.
    proc = worker(topic, group, out, "--shutdown-grace-s", "120", delay=3.0)
    wait_until(lambda: len(_finished(out)) >= 3, 60, "3 records before SIGINT")
    proc.send_signal(signal.SIGINT)
    _wait_logged(tmp_path / "worker-0.log", "SIGINT: draining")
    time.sleep(2 * SAME_REQUEST_S)
    assert proc.poll() is None, "still draining"
    proc.send_signal(signal.SIGINT)

    assert proc.wait(timeout=20) == 130
    assert "second SIGINT: exiting at once" in (tmp_path / "worker-0.log").read_text()
