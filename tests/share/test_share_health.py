"""Liveness of a share-group worker: a share group has no poll interval (a member waits for its
handlers between polls), so a member whose loop has not turned for half its record lock (10 s
at least) is dead, while a slow handler is fine until a record has been in it longer than
``processing_timeout_s``. Judged from the state alone, and from a running share consumer's
own snapshot (which recovers once the handler returns: the record, whose lock ran out, is
delivered again)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from kafleet import Record
from kafleet.health.assessment import liveness
from tests.conftest import ConfigFactory, TopicFactory
from tests.infra.records import ProduceReport
from tests.infra.waiting import wait_until
from tests.share.conftest import StartShare

NOW = 1_800_000_000.0
STALLED = "a share consumer's loop has not turned"
SLOW = "a share record has been in its handler"


def _state(**fields: Any) -> dict[str, Any]:
    """A share worker's state as it publishes it: its loop turned 0.1 s ago, nothing in hand,
    a 30 s record lock and a 300 s processing timeout."""
    return {
        "group_type": "share",
        "written_at": NOW,
        "record_lock_ms": 30_000,
        "processing_timeout_s": 300.0,
        "seconds_since_poll": 0.1,
        "oldest_in_flight_s": 0.0,
        "partitions": {},
        "oldest_abandoned_s": 0.0,
        "fatal_error": None,
        **fields,
    }


def _judge(state: dict[str, Any]) -> tuple[bool, str]:
    verdict = liveness(state, NOW, started_at=NOW - 600)
    return verdict.ok, "\n".join(verdict.reasons)


def test_a_share_worker_whose_loops_turn_is_live() -> None:
    assert _judge(_state()) == (True, "")


def test_a_member_loop_stalled_beyond_half_the_lock_fails() -> None:
    ok, reasons = _judge(_state(seconds_since_poll=16.0))

    assert not ok
    assert STALLED in reasons
    assert "limit 15 s" in reasons


def test_a_member_loop_stalled_within_half_the_lock_passes() -> None:
    assert _judge(_state(seconds_since_poll=14.0)) == (True, "")


def test_a_stale_state_file_counts_as_time_the_loop_did_not_turn() -> None:
    stale = _state(written_at=NOW - 10.0, seconds_since_poll=6.0)

    ok, reasons = _judge(stale)

    assert not ok
    assert STALLED in reasons


def test_a_short_lock_still_allows_ten_seconds_without_a_turn() -> None:
    short = {"record_lock_ms": 5000}

    assert _judge(_state(seconds_since_poll=9.0, **short)) == (True, "")
    ok, reasons = _judge(_state(seconds_since_poll=11.0, **short))
    assert not ok
    assert "limit 10 s" in reasons


def test_a_consumer_groups_poll_interval_does_not_apply_to_a_share_group() -> None:
    waited = _state(seconds_since_poll=12.0, max_poll_interval_ms=10_000)

    assert _judge(waited) == (True, "")


def test_a_slow_handler_within_processing_timeout_s_passes() -> None:
    slow = _state(oldest_in_flight_s=250.0, seconds_since_poll=0.1)

    assert _judge(slow) == (True, "")


def test_a_handler_beyond_processing_timeout_s_fails_though_the_loop_turns() -> None:
    hung = _state(oldest_in_flight_s=301.0, seconds_since_poll=0.1)

    ok, reasons = _judge(hung)

    assert not ok
    assert SLOW in reasons
    assert STALLED not in reasons


def test_the_state_files_age_counts_toward_a_records_time_in_its_handler() -> None:
    stale = _state(written_at=NOW - 5.0, oldest_in_flight_s=296.0)

    ok, reasons = _judge(stale)

    assert not ok
    assert SLOW in reasons


def test_a_share_consumer_with_a_hung_handler_says_so_in_its_snapshot_and_recovers(
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    share_config: ConfigFactory,
    start_share: StartShare,
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, 1)
    config = share_config(topic, processing_timeout_s=3.0)
    released = threading.Event()
    calls: list[int] = []

    def hang_the_first_time(record: Record) -> None:
        calls.append(record.offset)
        if len(calls) == 1:
            released.wait(60)

    consumer, polls = start_share(config, hang_the_first_time)

    def failing() -> dict[str, Any] | None:
        snapshot = consumer.snapshot()
        return None if snapshot["healthy"] else snapshot

    try:
        wait_until(lambda: calls, 60, "the record in its handler")
        hung = wait_until(failing, 30, "the snapshot to fail liveness")
        # A second beyond the record's 3 s lock, so the broker has surely taken it back.
        wait_until(
            lambda: consumer.snapshot()["oldest_in_flight_s"] > 4.0, 30, "its lock long gone"
        )
    finally:
        released.set()

    assert hung is not None
    reasons = "\n".join(hung["unhealthy_reasons"])
    assert SLOW in reasons
    assert STALLED not in reasons  # its loop kept turning while it waited
    assert hung["oldest_in_flight_s"] > 3.0
    assert hung["share"]["members"][0]["in_hand"] == 1
    wait_until(lambda: consumer.snapshot()["healthy"], 60, "the snapshot to be healthy again")
    # Its lock ran out in the handler, so the group delivered it again. (The late acceptance
    # is usually refused, counted in acks_refused; but when the Java client's fetch, still in
    # flight, had already taken the record again for this member, the broker takes it.)
    wait_until(lambda: len(calls) == 2, 60, "the record's second delivery handled")
    assert polls.deliveries(0) == [1, 2]
    assert consumer.counts.acks_refused <= 1
