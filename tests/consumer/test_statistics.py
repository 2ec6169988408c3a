"""librdkafka's statistics, read into what the watch over fetching judges: an active fetcher's
own fetch position and queue count; in any other fetch state, where kafleet is, and nothing
unread (a stopped fetcher's queue is never delivered). The watch, given such a reading, finds
the stall."""

from __future__ import annotations

import json
from unittest.mock import MagicMock

import pytest
from confluent_kafka import Message

from kafleet.config.model import ConsumerConfig
from kafleet.engine.fetch_watch import FetchWatch
from kafleet.engine.statistics import Reading, read_statistics
from kafleet.health.state import Stats
from tests.infra.clock import Clock

TP = ("orders", 0)
NOT_ACTIVE = ["none", "stopping", "stopped", "offset-query", "offset-wait", "validate-epoch-wait"]


def _raw(fetch_state: str) -> str:
    """A fetcher that fetched to 130 while kafleet got records up to 29, 100 queued."""
    part = {
        "fetch_state": fetch_state,
        "next_offset": 130,
        "app_offset": 30,
        "committed_offset": 30,
        "fetchq_cnt": 100,
        "hi_offset": 130,
        "ls_offset": 130,
        "leader": 1,
    }
    return json.dumps({"topics": {"orders": {"partitions": {"0": part}}}})


def _reading(fetch_state: str) -> Reading:
    return read_statistics(_raw(fetch_state), [TP], True)[1][TP]


def test_an_active_fetcher_is_as_far_as_it_fetched_with_its_queue_still_to_read() -> None:
    reading = _reading("active")

    assert (reading.end, reading.position, reading.unread) == (130, 130, 100)


@pytest.mark.parametrize("fetch_state", NOT_ACTIVE)
def test_a_fetcher_not_active_is_where_kafleet_is_with_nothing_unread(fetch_state: str) -> None:
    reading = _reading(fetch_state)

    assert (reading.end, reading.position, reading.unread) == (130, 30, 0)


def test_the_watch_finds_a_stopped_fetcher_with_records_queued_stalled_after_the_bound() -> None:
    """CI's case: the fetcher stopped as a fetch of 100 records came back; before, they read as
    unread, the partition as caught up, and it never stalled."""
    config = ConsumerConfig(
        bootstrap_servers="k:9092", group_id="g", topics=["orders"], fetch_stall_timeout_ms=2000
    )
    clock, stats, consumer = Clock(), Stats(), MagicMock()
    watch = FetchWatch(config, stats, lambda tp: False, lambda c, tps: [], clock=clock)
    watch.assigned([TP])
    watch.saw(
        [(TP, [Message(topic=TP[0], partition=TP[1], offset=29)])]
    )  # the records up to 29 reached kafleet

    while clock.now < 2 * watch.timeout_ms / 1000 and not stats.fetch_stalls:
        clock.now += 0.25
        watch.statistics(_raw("stopped"), [TP])
        watch.check(consumer)

    assert stats.fetch_stalls == 1
    assert stats.fetch_restarts == 1
