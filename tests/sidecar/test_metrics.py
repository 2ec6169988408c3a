"""Every documented metric is exported, with its labels, and the README lists them all."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from kafleet.metrics import METRICS, StateCollector, View, markdown

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
}


def scrape(state: dict[str, object] = STATE) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StateCollector(lambda: View(state, True, True, True, {"orders[0]": "WARN"})))
    return generate_latest(registry).decode()


def test_every_documented_metric_is_exported() -> None:
    text = scrape()

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


def test_the_readme_lists_every_metric_as_generated() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()

    for row in markdown().splitlines()[2:]:
        assert row in readme, f"README.md is missing or out of date for: {row[:60]}"


def test_rejected_config_changes_are_counted_and_flagged_until_a_good_change_clears_them() -> None:
    rejected = scrape()
    cleared = scrape({**STATE, "config_rejected": None})

    assert 'kafleet_config_rejections_total{group="billing"} 2.0' in rejected
    assert 'kafleet_config_rejected{group="billing"} 1.0' in rejected
    assert 'kafleet_config_rejections_total{group="billing"} 2.0' in cleared
    assert 'kafleet_config_rejected{group="billing"} 0.0' in cleared
