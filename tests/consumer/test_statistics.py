"""librdkafka's statistics, read into what the watch over fetching judges: a started fetcher's
own position and queue count, a stopped one's do not (its queue is never delivered)."""

from __future__ import annotations

import json

from kafleet.engine.fetch_stalls import Facts, stalled
from kafleet.engine.statistics import Reading, read_statistics


def _reading(fetch_state: str, fetchq_cnt: int = 100) -> Reading:
    part = {
        "fetch_state": fetch_state,
        "next_offset": 130,
        "app_offset": 30,
        "committed_offset": 30,
        "fetchq_cnt": fetchq_cnt,
        "hi_offset": 130,
        "ls_offset": 130,
        "leader": 1,
    }
    raw = json.dumps({"topics": {"orders": {"partitions": {"0": part}}}})
    return read_statistics(raw, [("orders", 0)], True)[1][("orders", 0)]


def test_a_started_fetcher_is_as_far_as_it_fetched_with_its_queue_still_to_read() -> None:
    reading = _reading("active")

    assert (reading.end, reading.position, reading.unread) == (130, 130, 100)


def test_a_stopped_fetchers_queue_and_fetch_position_are_not_where_kafleet_is() -> None:
    """A fetch answered while the fetcher stopped leaves its records queued, never delivered:
    counted as unread they hid the partition's lag, and it never stalled."""
    for state in ("stopped", "stopping", "none"):
        reading = _reading(state)

        assert (reading.end, reading.position, reading.unread) == (130, 30, 0)


def test_a_stopped_fetcher_with_records_queued_is_judged_stalled_after_the_bound() -> None:
    reading = _reading("stopped")
    facts = Facts(
        flowing_since=0.0,
        log_end=reading.end,
        position=max(30, reading.position or 0),
        unread=reading.unread,
        lagging_since=0.0,
    )

    assert stalled({("orders", 0): facts}, now=2.0, timeout_s=2.0) == {("orders", 0): 100}
