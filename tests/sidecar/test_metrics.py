"""Every documented metric is exported, with its labels (the site's Metrics page lists them
all: tests/docs/test_metrics_page.py)."""

from __future__ import annotations

import subprocess
import threading
import time

from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from kafleet.sidecar.collector import StateCollector, View
from kafleet.sidecar.lag import Status
from kafleet.sidecar.metrics import METRICS
from kafleet.sidecar.server import MetricsPage
from tests.infra.prometheus import promtool

STATE = {
    "group_id": "billing",
    "seconds_since_poll": 0.02,
    "assigned": ["orders[0]"],
    "in_flight": 1,
    "max_poll_records": 500,
    "concurrency": 16,
    "partitions": {
        "orders[0]": {
            "topic": "orders",
            "partition": 0,
            "committed": 90,
            "position": 95,
            "log_end": 120,
            "queued": 20,
            "queued_bytes": 2400,
            "paused": True,
            "in_flight": 1,
            "held": 40,
            "oldest_in_flight_s": 0.3,
        }
    },
    "handler_latency": {"buckets": [0.01, 0.1], "counts": [5, 3, 1], "sum": 1.2},
    "commit_latency": {"sum": 0.05, "count": 4},
    "records_processed": 9,
    "records_failed": 2,
    "retries": 1,
    "dead_lettered": 1,
    "commits": 4,
    "commit_failures": 0,
    "rebalances": 1,
    "partitions_revoked_total": 0,
    "partitions_lost_total": 0,
    "pauses": 3,
    "resumes": 2,
    "revoke_seconds": [0.25],
    "sink": {"where": "sc://spark:15002", "failing_since": 1.7e9, "last_error": "down"},
    "sink_batches": 7,
    "sink_rows": 700,
    "sink_write_failures": 2,
    "sink_write_seconds_sum": 3.5,
    "offset_rewinds": 0,
    "abandoned_in_flight": 0,
    "config_rejections": 2,
    "config_rejected": "invalid configuration (worker.yaml):\n  - concurrency: ...",
    "fetch_stalls": 2,
    "fetch_restarts": 3,
    "fetch_stalls_recovered": 1,
    "fetch_stall_timeout_ms": 60_000,
    "stalled_partitions": {
        "orders[0]": {"topic": "orders", "partition": 0, "lag": 25, "quiet_s": 80.0, "restarts": 2}
    },
}

# A share-mode worker's state: no assignment, no partitions; the share group's counts and lag.
SHARE_STATE = {
    **STATE,
    "group_type": "share",
    "assigned": [],
    "partitions": {},
    "share": {
        "acquired": 120,
        "redelivered": 4,
        "accepted": 110,
        "released": 6,
        "rejected": 1,
        "dead_lettered": 1,
        "archived": 0,
        "acks_refused": 2,
        "lag": {"orders[0]": 30, "orders[1]": None, "orders[2]": 12},
    },
}


def scrape(
    state: dict[str, object] = STATE,
    per_partition: bool = True,
    status: dict[str, Status] | None = None,
) -> str:
    lag_status: dict[str, Status] = status if status is not None else {"orders[0]": "WARN"}
    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        StateCollector(lambda: View(state, True, True, True, lag_status), per_partition)
    )
    return generate_latest(registry).decode()


def value(text: str, name: str, **labels: str) -> float | None:
    """The value of the sample ``name`` with ``labels`` (and ``group``) in ``text``."""
    for line in text.splitlines():
        if line.startswith((name + "{", name + " ")) and all(
            f'{k}="{v}"' in line for k, v in labels.items()
        ):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_every_documented_metric_is_exported() -> None:
    text = scrape() + scrape(SHARE_STATE)

    for name, _kind, _labels, _doc in METRICS:
        assert f"\nkafleet_{name}" in "\n" + text, name


def test_partition_metrics_carry_group_topic_and_partition_and_the_lag_is_end_minus_committed() -> (
    None
):
    text = scrape()

    assert (
        'kafleet_partition_lag_records{group="billing",partition="0",topic="orders"} 30.0' in text
    )
    assert (
        'kafleet_partition_position_lag_records{group="billing",partition="0",topic="orders"} 25.0'
        in text
    )
    warn = 'kafleet_partition_lag_status{group="billing",partition="0",status="WARN",'
    assert warn + 'topic="orders"} 1.0' in text
    assert 'kafleet_handler_latency_seconds_bucket{group="billing",le="+Inf"} 9.0' in text


def test_a_share_workers_counts_are_exported_and_its_group_lag_sums_the_known_partitions() -> None:
    text = scrape(SHARE_STATE)

    assert value(text, "kafleet_share_records_acquired_total") == 120
    assert value(text, "kafleet_share_records_released_total") == 6
    assert value(text, "kafleet_share_records_archived_total") == 0
    assert value(text, "kafleet_share_acks_refused_total") == 2
    assert value(text, "kafleet_share_group_lag_records") == 42  # the unknown one left out
    assert value(scrape(), "kafleet_share_group_lag_records") is None  # consumer groups: none


def test_rejected_config_changes_are_counted_and_flagged_until_a_good_change_clears_them() -> None:
    rejected = scrape()
    cleared = scrape({**STATE, "config_rejected": None})

    assert 'kafleet_config_rejections_total{group="billing"} 2.0' in rejected
    assert 'kafleet_config_rejected{group="billing"} 1.0' in rejected
    assert 'kafleet_config_rejections_total{group="billing"} 2.0' in cleared
    assert 'kafleet_config_rejected{group="billing"} 0.0' in cleared


def test_partitions_that_fetch_nothing_are_counted_and_their_stalls_and_restarts_totalled() -> None:
    stalled = scrape()
    flowing = scrape({**STATE, "stalled_partitions": {}})

    assert value(stalled, "kafleet_fetch_stalled_partitions") == 1
    assert value(flowing, "kafleet_fetch_stalled_partitions") == 0
    assert value(stalled, "kafleet_fetch_stalls_total") == 2
    assert value(stalled, "kafleet_fetch_restarts_total") == 3
    assert value(stalled, "kafleet_fetch_stalls_recovered_total") == 1


BASE_UNITS = ("seconds", "bytes", "ratio", "volts", "amperes", "joules", "grams", "meters")
NOT_BASE = ("milliseconds", "microseconds", "minutes", "hours", "days", "kilobytes", "megabytes")


def test_every_metric_name_ends_in_its_unit_and_only_counters_end_in_total() -> None:
    for name, kind, _labels, _doc in METRICS:
        words = name.removesuffix("_total").split("_")
        units = [w for w in words if w in BASE_UNITS]
        assert not any(w in NOT_BASE for w in words), f"kafleet_{name}: not a base unit"
        assert units in ([], [words[-1]]), f"kafleet_{name}: its unit is not the last word"
        assert name.endswith("_total") == (kind == "counter"), f"kafleet_{name}: _total"


def test_promtool_finds_nothing_to_say_about_the_exported_metrics() -> None:
    for per_partition in (True, False):
        text = scrape(per_partition=per_partition)

        checked = subprocess.run(
            [promtool(), "check", "metrics"], input=text, capture_output=True, text=True
        )

        assert (checked.returncode, checked.stdout + checked.stderr) == (0, "")


def test_the_poll_age_counts_the_time_since_the_state_was_written() -> None:
    hung = {**STATE, "written_at": time.time() - 30, "seconds_since_poll": 0.02}

    age = value(scrape(hung), "kafleet_poll_age_seconds")

    assert age is not None
    assert 30 <= age < 31


def test_without_per_partition_metrics_only_the_groups_aggregates_are_exported() -> None:
    two = {**STATE["partitions"]["orders[0]"], "partition": 1, "committed": 100, "paused": False}  # type: ignore[index]
    state = {**STATE, "partitions": {**STATE["partitions"], "orders[1]": two}}  # type: ignore[dict-item]
    status: dict[str, Status] = {"orders[0]": "WARN", "orders[1]": "OK"}

    full = scrape(state, per_partition=True, status=status)
    aggregates = scrape(state, per_partition=False, status=status)

    assert "kafleet_partition_" in full
    assert "kafleet_partition_" not in aggregates
    for text in (full, aggregates):
        assert value(text, "kafleet_lag_records") == 30 + 20
        assert value(text, "kafleet_max_partition_lag_records") == 30
        assert value(text, "kafleet_partitions_in_lag_status", status="WARN") == 1
        assert value(text, "kafleet_partitions_in_lag_status", status="STALL") == 0
        assert value(text, "kafleet_queued_records") == 40
        assert value(text, "kafleet_paused_partitions") == 1


def test_scrapers_side_by_side_share_one_rendering_of_the_page() -> None:
    renders = []

    def view() -> View:
        renders.append(1)
        time.sleep(0.2)
        return View(STATE, True, True, True, {})

    registry = CollectorRegistry(auto_describe=False)
    registry.register(StateCollector(view))
    page = MetricsPage(registry)
    scrapers = [threading.Thread(target=page.body) for _ in range(4)]

    for scraper in scrapers:
        scraper.start()
    for scraper in scrapers:
        scraper.join()

    assert len(renders) == 1
