"""Failures in a share group lose nothing and leave nothing for the broker to archive: a poison
record goes to the dead-letter topic before the group's delivery limit and is acknowledged
there (accepted, or rejected when asked), a record that fails and then succeeds is accepted
once, and a failure whose backoff would outlast the record's lock is released to the group and
delivered again with a fresh lock."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from kafleet import Record, ShareConsumer
from tests.conftest import ConfigFactory, TopicFactory
from tests.infra.records import ProduceReport, record_number
from tests.infra.waiting import wait_until
from tests.share.conftest import Journal, StartShare, read_topic, share_group_lag

QUICK_RETRIES = {"max_attempts": 3, "initial_backoff_ms": 20}
# A 3 s record lock (processing_timeout_s 3) and a first backoff of 4 s: a retry in process
# cannot fit in the lock, so a failed record goes back to the group.
SHORT_LOCK_S = 3.0
LONG_BACKOFF: dict[str, float] = {"max_attempts": 3, "initial_backoff_ms": 4000, "jitter": 0.0}


def _lag_drops_to_zero(kafka: str, group: str, topic: str) -> None:
    wait_until(
        lambda: share_group_lag(kafka, group) == {(topic, 0): 0},
        90,
        f"ShareGroupCommand to show lag 0 for {group}",
        every=1.0,
    )


def test_a_poison_record_is_dead_lettered_before_the_delivery_limit_and_not_left_to_archive(
    kafka: str,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    share_config: ConfigFactory,
    start_share: StartShare,
    journal: Journal,
) -> None:
    topic, dead = topic_factory(partitions=1), topic_factory(partitions=1)
    produce(topic, 300)
    config = share_config(
        topic,
        dead_letter_topic=dead,
        max_poll_records=3,
        concurrency=6,
        retry=QUICK_RETRIES,
        share={"consumers": 2},
    )

    consumer, polls = start_share(
        config, journal.handler(delay=0.005, fail=lambda number, call: number == 42)
    )
    wait_until(lambda: journal.count() >= 299, 120, "every other record handled")
    wait_until(lambda: consumer.counts.dead_lettered == 1, 60, "the poison record parked")

    [parked] = read_topic(kafka, dead, 1)
    headers = dict(parked.headers() or [])
    assert record_number(parked.value() or b"") == 42
    assert headers["kafleet.attempts"] == b"3"
    assert headers["kafleet.delivery.count"] == b"1"  # of the group's 5: far from archiving
    assert headers["kafleet.error.message"] == b"cannot bill record 42 (call 3)"
    assert headers["kafleet.original.topic"] == topic.encode()
    assert journal.calls_of(42) == 3
    assert polls.deliveries(42) == [1]
    assert journal.numbers() == Counter(n for n in range(300) if n != 42)
    _lag_drops_to_zero(kafka, config.group_id, topic)
    counts = consumer.counts.as_dict()
    assert counts["archived"] == 0
    assert counts["accepted"] == 300  # the parked record is accepted: done for the group
    assert counts["rejected"] == counts["released"] == counts["acks_refused"] == 0


def test_a_record_that_always_fails_beyond_its_lock_is_dead_lettered_on_its_last_delivery(
    kafka: str,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    share_config: ConfigFactory,
    start_share: StartShare,
    journal: Journal,
) -> None:
    topic, dead = topic_factory(partitions=1), topic_factory(partitions=1)
    produce(topic, 10)
    config = share_config(
        topic,
        dead_letter_topic=dead,
        max_poll_records=3,
        retry=LONG_BACKOFF,
        share={"delivery_limit": 3},
        processing_timeout_s=SHORT_LOCK_S,
    )

    consumer, polls = start_share(config, journal.handler(fail=lambda number, call: number == 4))
    wait_until(lambda: consumer.counts.dead_lettered == 1, 90, "the record parked")

    [parked] = read_topic(kafka, dead, 1)
    headers = dict(parked.headers() or [])
    assert record_number(parked.value() or b"") == 4
    assert headers["kafleet.delivery.count"] == b"3"  # the last delivery the group allows
    assert headers["kafleet.attempts"] == b"1"  # each delivery's one attempt: no time for more
    assert polls.deliveries(4) == [1, 2, 3]
    assert journal.calls_of(4) == 3
    assert journal.numbers() == Counter(n for n in range(10) if n != 4)
    _lag_drops_to_zero(kafka, config.group_id, topic)
    counts = consumer.counts.as_dict()
    assert counts["released"] == 2
    assert counts["redelivered"] == 2
    assert counts["archived"] == 0


def test_a_record_that_fails_twice_then_succeeds_is_accepted_once(
    kafka: str,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    share_config: ConfigFactory,
    start_share: StartShare,
    journal: Journal,
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, 50)
    config = share_config(topic, max_poll_records=3, retry=QUICK_RETRIES)
    results: list[tuple[int, Any]] = []

    def collect(record: Record, result: Any) -> None:
        results.append((record_number(record.value or b""), result))

    consumer, polls = start_share(
        config,
        journal.handler(fail=lambda number, call: number == 7 and call <= 2),
        on_result=collect,
    )
    wait_until(lambda: consumer.counts.accepted == 50, 60, "every record accepted")

    assert journal.calls_of(7) == 3
    assert results.count((7, 7)) == 1
    assert Counter(number for number, _ in results) == Counter(range(50))
    assert polls.deliveries(7) == [1]  # retried in process, within its lock
    assert consumer.stats.retries == 2
    counts = consumer.counts.as_dict()
    assert counts["dead_lettered"] == counts["released"] == counts["redelivered"] == 0
    _lag_drops_to_zero(kafka, config.group_id, topic)


def test_a_failure_whose_backoff_outlasts_the_lock_is_released_and_succeeds_on_redelivery(
    kafka: str,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    share_config: ConfigFactory,
    start_share: StartShare,
    journal: Journal,
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, 20)
    config = share_config(
        topic, max_poll_records=3, retry=LONG_BACKOFF, processing_timeout_s=SHORT_LOCK_S
    )
    results: list[int] = []

    consumer, polls = start_share(
        config,
        journal.handler(fail=lambda number, call: number == 7 and call == 1),
        on_result=lambda record, result: results.append(result),
    )
    wait_until(lambda: consumer.counts.accepted == 20, 60, "every record accepted")

    assert polls.deliveries(7) == [1, 2]  # released, then delivered again
    assert journal.calls_of(7) == 2
    assert sorted(results) == list(range(20))
    counts = consumer.counts.as_dict()
    assert counts["released"] >= 1
    assert counts["redelivered"] >= 1
    assert counts["dead_lettered"] == counts["archived"] == 0
    assert consumer.stats.retries == 0  # never retried in process: the lock had no room
    _lag_drops_to_zero(kafka, config.group_id, topic)


def test_with_dead_letter_ack_reject_a_parked_record_is_rejected(
    kafka: str,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    share_config: ConfigFactory,
    start_share: StartShare,
    journal: Journal,
) -> None:
    topic, dead = topic_factory(partitions=1), topic_factory(partitions=1)
    produce(topic, 30)
    config = share_config(
        topic,
        dead_letter_topic=dead,
        max_poll_records=3,
        retry=QUICK_RETRIES,
        share={"dead_letter_ack": "reject"},
    )

    consumer, _ = start_share(config, journal.handler(fail=lambda number, call: number == 11))
    wait_until(lambda: consumer.counts.rejected == 1, 60, "the poison record rejected")
    wait_until(lambda: consumer.counts.accepted == 29, 60, "every other record accepted")

    [parked] = read_topic(kafka, dead, 1)
    assert record_number(parked.value() or b"") == 11
    assert consumer.counts.dead_lettered == 1
    assert consumer.counts.archived == 0
    _lag_drops_to_zero(kafka, config.group_id, topic)


def test_a_stop_during_a_backoff_on_the_last_delivery_dead_letters_the_record_not_releases_it(
    kafka: str,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    share_config: ConfigFactory,
) -> None:
    topic, dead = topic_factory(partitions=1), topic_factory(partitions=1)
    produce(topic, 1)
    calls: list[float] = []

    def handle(record: Record) -> None:
        calls.append(time.monotonic())
        if len(calls) == 1:
            time.sleep(6.5)  # outlives its 5 s lock: the other member gets delivery 2, the last
        raise ValueError("cannot bill it")

    config = share_config(
        topic,
        dead_letter_topic=dead,
        max_poll_records=1,
        processing_timeout_s=5.0,
        retry={"max_attempts": 3, "initial_backoff_ms": 2500, "multiplier": 1.0, "jitter": 0.0},
        share={"consumers": 2, "delivery_limit": 2},
    )
    consumer = ShareConsumer(config, handle).start()
    try:
        wait_until(lambda: len(calls) == 2, 60, "the second, last delivery's first attempt")
        time.sleep(0.5)  # inside its 2.5 s backoff
        consumer.stop(grace_s=10)
        assert consumer.wait(timeout=60)
    finally:
        consumer.stop(grace_s=1)
        consumer.wait(timeout=30)

    [parked] = read_topic(kafka, dead, 1)
    assert dict(parked.headers() or [])["kafleet.delivery.count"] == b"2"
    counts = consumer.counts.as_dict()
    assert counts["dead_lettered"] == 1
    assert counts["archived"] == 0
    assert len(calls) == 2  # the backoff was cut short: no third attempt


def test_a_slow_record_does_not_hold_its_neighbours_acknowledgements_past_their_locks(
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    share_config: ConfigFactory,
    start_share: StartShare,
    journal: Journal,
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, 4)
    slow = journal.handler()

    def handle(record: Record) -> int:
        if record_number(record.value or b"") == 0 and journal.calls_of(0) == 0:
            time.sleep(4.5)  # past its 3 s lock, the first time
        return slow(record)

    config = share_config(topic, max_poll_records=4, concurrency=4, processing_timeout_s=3.0)
    _, polls = start_share(config, handle)
    wait_until(lambda: journal.numbers()[0] >= 2, 60, "the slow record's second delivery")
    time.sleep(1.0)

    # Records 1-3 were acknowledged as they ended, within their locks: handled once each.
    assert [journal.numbers()[n] for n in (1, 2, 3)] == [1, 1, 1]
    assert polls.deliveries(0) == [1, 2]
