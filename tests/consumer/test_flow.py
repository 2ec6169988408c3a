"""Records flow through the real broker in order, within their bounds, at every guarantee."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from kafleet import ParallelConsumer, Record, load_config
from kafleet.cli.live_config import ConfigWatcher
from tests.conftest import ConfigFactory, TopicFactory
from tests.consumer.conftest import Journal
from tests.infra.records import ProduceReport
from tests.infra.waiting import wait_until

Start = Callable[..., ParallelConsumer]


def test_each_partitions_records_are_handled_one_at_a_time_in_offset_order(
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    consumer_config: ConfigFactory,
    start_consumer: Start,
    journal: Journal,
) -> None:
    topic = topic_factory(partitions=4)
    produce(topic, 2_000, keys=40)
    handler = journal.handler(delay=lambda r: random.random() / 1000, lane=lambda r: r.partition)

    start_consumer(consumer_config(topic, ordering="partition", concurrency=8), handler)
    wait_until(lambda: journal.count() >= 2_000, 60, "2,000 records")

    assert set(journal.numbers().values()) == {1}
    assert journal.overlaps == []
    by_partition: dict[int, list[int]] = defaultdict(list)
    for entry in journal.snapshot():
        by_partition[entry.partition].append(entry.offset)
    for offsets in by_partition.values():
        assert offsets == sorted(offsets)
    assert journal.most_at_once > 1  # the four partitions did run side by side


def test_each_keys_records_are_handled_in_order_while_keys_run_in_parallel(
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    consumer_config: ConfigFactory,
    start_consumer: Start,
    journal: Journal,
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, 1_000, keys=20)
    handler = journal.handler(delay=lambda r: 0.002, lane=lambda r: r.key)

    start_consumer(consumer_config(topic, ordering="key", concurrency=32), handler)
    wait_until(lambda: journal.count() >= 1_000, 60, "1,000 records")

    assert set(journal.numbers().values()) == {1}
    assert journal.overlaps == []
    by_key: dict[bytes | None, list[int]] = defaultdict(list)
    for entry in journal.snapshot():
        by_key[entry.key].append(entry.offset)
    for offsets in by_key.values():
        assert offsets == sorted(offsets)
    assert journal.most_at_once > 4  # one partition, yet many keys at once


def test_coroutine_handlers_run_concurrently_on_one_event_loop(
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    consumer_config: ConfigFactory,
    start_consumer: Start,
) -> None:
    topic = topic_factory(partitions=2)
    produce(topic, 400)
    active, most, done = 0, 0, 0

    async def handle(record: Record) -> None:
        nonlocal active, most, done
        active += 1
        most = max(most, active)
        await asyncio.sleep(0.02)
        active -= 1
        done += 1

    consumer = start_consumer(consumer_config(topic, ordering="unordered", concurrency=50), handle)
    wait_until(lambda: done >= 400, 60, "400 records")

    assert most > 10
    assert consumer.snapshot()["records_processed"] == 400


def test_back_pressure_keeps_every_queue_within_its_bound_and_pauses_then_resumes(
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    consumer_config: ConfigFactory,
    start_consumer: Start,
    journal: Journal,
) -> None:
    topic = topic_factory(partitions=2)
    config = consumer_config(
        topic, concurrency=2, max_poll_records=10, queue={"max_records": 20, "resume_at": 0.5}
    )
    consumer = start_consumer(config, journal.handler(delay=lambda r: 0.004))
    deepest = 0
    sampling = True

    def sample() -> None:
        nonlocal deepest
        while sampling:
            for part in consumer.snapshot()["partitions"].values():
                deepest = max(deepest, part["queued"])
            time.sleep(0.002)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        wait_until(lambda: consumer.snapshot()["assigned"], 30, "an assignment")
        produce(topic, 1_000)  # a fast producer races the slow handler
        wait_until(lambda: journal.count() >= 1_000, 90, "1,000 records")
    finally:
        sampling = False
        sampler.join()

    # The Poller resumes a drained partition at its next poll, not at the last record's end.
    wait_until(
        lambda: not any(p["paused"] for p in consumer.snapshot()["partitions"].values()),
        5,
        "every partition resumed once drained",
    )
    snapshot = consumer.snapshot()
    assert 0 < deepest <= 20
    assert snapshot["pauses"] >= 2
    assert snapshot["resumes"] >= 2
    assert set(journal.numbers().values()) == {1}


def test_a_handler_slower_than_max_poll_interval_causes_no_rebalance_and_no_duplicate(
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    consumer_config: ConfigFactory,
    start_consumer: Start,
    journal: Journal,
) -> None:
    topic = topic_factory(partitions=2)
    produce(topic, 2, partition=0)
    produce(topic, 2, partition=1, start=2)
    config = consumer_config(
        topic,
        max_poll_interval_ms=6_000,
        session_timeout_ms=6_000,
        drain_timeout_s=2.0,
        concurrency=2,
    )
    slow = {0, 2}  # the first record of each partition takes 10 s, over the 6 s interval

    consumer = start_consumer(
        config,
        journal.handler(
            delay=lambda r: 10.0 if int((r.value or b"0:").split(b":")[0]) in slow else 0.0
        ),
    )
    wait_until(lambda: journal.count() >= 4, 40, "4 records")

    snapshot = consumer.snapshot()
    assert journal.numbers() == {0: 1, 1: 1, 2: 1, 3: 1}
    assert snapshot["rebalances"] == 1  # the first assignment, nothing after
    assert snapshot["partitions_revoked_total"] == 0
    assert snapshot["partitions_lost_total"] == 0


def test_at_least_once_commits_only_what_handlers_finished(
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    consumer_config: ConfigFactory,
    start_consumer: Start,
    committed_offsets: Callable[[str, str, int], dict[int, int]],
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, 20, partition=0)
    release = threading.Event()

    def handle(record: Record) -> None:
        if record.offset == 10:
            release.wait(30)

    config = consumer_config(topic, ordering="unordered", concurrency=20)
    start_consumer(config, handle)

    wait_until(
        lambda: committed_offsets(config.group_id, topic, 1)[0] == 10,
        30,
        "a commit up to the unfinished record",
    )
    time.sleep(0.5)  # later commits must not pass it while it runs
    assert committed_offsets(config.group_id, topic, 1)[0] == 10
    release.set()
    wait_until(lambda: committed_offsets(config.group_id, topic, 1)[0] == 20, 30, "the rest")


def test_at_most_once_commits_before_the_handler_runs(
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    consumer_config: ConfigFactory,
    start_consumer: Start,
    committed_offsets: Callable[[str, str, int], dict[int, int]],
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, 5, partition=0)
    release = threading.Event()
    config = consumer_config(topic, guarantee="at-most-once")

    start_consumer(config, lambda record: release.wait(30))

    wait_until(
        lambda: committed_offsets(config.group_id, topic, 1)[0] == 5,
        30,
        "the commit of every record before any handler finished",
    )
    release.set()


def test_a_handler_stuck_past_processing_timeout_marks_the_worker_unhealthy_until_it_ends(
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    consumer_config: ConfigFactory,
    start_consumer: Start,
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, 1)
    release = threading.Event()
    consumer = start_consumer(
        consumer_config(topic, processing_timeout_s=0.5), lambda record: release.wait(30)
    )

    wait_until(lambda: not consumer.snapshot()["healthy"], 30, "the worker to turn unhealthy")
    reasons = consumer.snapshot()["unhealthy_reasons"]
    assert any(f"{topic}[0]" in r and "processing_timeout_s" in r for r in reasons)
    release.set()
    wait_until(lambda: consumer.snapshot()["healthy"], 10, "the worker to be healthy again")


def test_max_poll_records_and_concurrency_change_live_without_a_rebalance(
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    consumer_config: ConfigFactory,
    start_consumer: Start,
    journal: Journal,
    tmp_path: Path,
) -> None:
    topic = topic_factory(partitions=2)
    produce(topic, 200)
    config = consumer_config(topic, ordering="unordered", concurrency=2)
    consumer = start_consumer(config, journal.handler(delay=lambda r: 0.01))
    wait_until(lambda: journal.count() >= 20, 30, "some records")

    consumer.tune(max_poll_records=7, concurrency=12)
    assert consumer.snapshot()["max_poll_records"] == 7

    path = tmp_path / "worker.yaml"
    path.write_text(
        f"bootstrap_servers: {config.bootstrap_servers}\ngroup_id: "
        f"{config.group_id}\ntopics: [{topic}]\nconcurrency: 12\n"
    )
    watcher = ConfigWatcher(
        path, config.model_copy(update={"concurrency": 12}), lambda live: consumer.tune(**live)
    )
    path.write_text(
        path.read_text().replace("concurrency: 12", "concurrency: 3\nmax_poll_records: 50")
    )
    watcher.check()

    snapshot = consumer.snapshot()
    assert snapshot["concurrency"] == 3
    assert snapshot["max_poll_records"] == 50
    wait_until(lambda: journal.count() >= 200, 60, "200 records")
    assert consumer.snapshot()["rebalances"] == 1


def test_a_topic_pattern_subscribes_to_every_matching_topic(
    kafka: str,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    start_consumer: Start,
    journal: Journal,
    group_id: Callable[[], str],
) -> None:
    first, second = topic_factory(partitions=1), topic_factory(partitions=1)
    produce(first, 10)
    produce(second, 10, start=10)
    shared = first.split("-", 1)[1].rsplit("-", 1)[0]  # the test's name, common to both
    config = load_config(
        None,
        {"bootstrap_servers": kafka, "group_id": group_id(), "topic_pattern": f"t[01]-{shared}-.*"},
    )

    start_consumer(config, journal.handler())

    wait_until(lambda: journal.count() >= 20, 30, "records of both topics")
    assert sorted(journal.numbers()) == list(range(20))
