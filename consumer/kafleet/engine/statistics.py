"""librdkafka's statistics, read: what they say of each assigned partition.

Owns: parsing the JSON that ``statistics.interval.ms`` delivers to ``stats_cb`` (on the Poller's
thread, inside ``consume()``) into, per assigned partition, its high watermark and application
offset (the worker's lag figures) and a ``Reading`` for the watch over fetching: the log end as the
consumer's ``isolation.level`` sees it (``ls_offset`` for read_committed, librdkafka's default, so
an open transaction is no lag), the furthest of librdkafka's own positions (the fetcher's
``next_offset`` passes transaction markers and aborted records that no record returned to kafleet
shows), the fetch state, the records fetched and not read yet (``fetchq_cnt``; both of these only
while the fetcher is started), and whether the partition has a leader; and whether the member is
steady in its group. Field names as ``rdkafka.c``'s ``rd_kafka_stats_emit_toppar`` writes them; a
log end there is learnt from fetch responses, so it stops moving when the partition's fetcher does.

Pure: no I/O. Does not own what is made of the readings (``fetch_watch.py``, ``consumer.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

TP = tuple[str, int]


@dataclass(frozen=True)
class Reading:
    """One partition in librdkafka's statistics."""

    end: int | None  # the log end as the consumer's isolation level sees it
    position: int | None  # the furthest of librdkafka's fetch, application and committed
    fetch_state: str | None
    unread: int  # fetched, not yet read by kafleet (fetchq_cnt)
    has_leader: bool


def _offset(value: object) -> int | None:
    return value if isinstance(value, int) and value >= 0 else None


def read_statistics(
    raw: str, assigned: Iterable[TP], read_committed: bool
) -> tuple[dict[TP, tuple[int, int]], dict[TP, Reading], bool]:
    """librdkafka's statistics JSON: per assigned partition with a known high watermark, that
    and its application offset (for lag), per assigned partition its ``Reading``, and whether
    the member is steady in its group (``cgrp``: state ``up``, join state ``steady``), which
    an assignment of no partitions under KIP-848 tells in no other way."""
    try:
        stats = json.loads(raw)
    except ValueError:
        return {}, {}, False
    group = stats.get("cgrp") or {}
    steady = group.get("state") == "up" and group.get("join_state") == "steady"
    topics = stats.get("topics", {})
    wanted = set(assigned)
    ends: dict[TP, tuple[int, int]] = {}
    readings: dict[TP, Reading] = {}
    for topic, info in topics.items():
        for number, part in info.get("partitions", {}).items():
            tp = (topic, int(number))
            if tp not in wanted:
                continue
            if part.get("hi_offset", -1) >= 0:
                ends[tp] = (int(part["hi_offset"]), int(part.get("app_offset", -1)))
            # librdkafka's fetch position (next_offset) and fetch queue count (fetchq_cnt) say
            # where kafleet is only while the fetcher is active: next_offset is reset only
            # there (an offset query or an epoch validation still shows the old fetcher's), and
            # a fetcher that stopped keeps records of an older op version queued, never
            # delivered (a fetch answered as it stopped). Read then, they hid its lag for good.
            # (While the queue is forwarded, librdkafka counts the consumer's whole queue,
            # which kafleet drains at its own pace.)
            active = part.get("fetch_state") == "active"
            keys = ("next_offset", "app_offset", "committed_offset") if active else (
                "app_offset", "committed_offset")  # fmt: skip
            known = [p for key in keys if (p := _offset(part.get(key))) is not None]
            readings[tp] = Reading(
                _offset(part.get("ls_offset" if read_committed else "hi_offset")),
                max(known) if known else None,
                part.get("fetch_state"),
                int(part.get("fetchq_cnt", 0)) if active else 0,
                int(part.get("leader", 0)) >= 0,  # -1: no leader known
            )
    return ends, readings, steady
