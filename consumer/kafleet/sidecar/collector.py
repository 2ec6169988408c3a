"""The worker's state as Prometheus metric families: the values of ``metrics.METRICS``.

Owns: turning one state (as the worker published it) plus the sidecar's judgements (liveness,
readiness, each partition's lag status) into the families ``METRICS`` lists, with the labels
``group``, ``topic`` and ``partition`` where they apply, and which key of the state feeds which
family. Does not own the catalogue of names, types, labels and meanings (``metrics.py``), nor
serving (``server.py``).

The per-partition families (``kafleet_partition_*``, labelled ``topic`` and ``partition``) can be
switched off (``per_partition=False``, the sidecar's ``--partition-metrics off``) for topics of
hundreds of partitions: 14 series a partition, 18 with the one-hot lag status. The group's
aggregates of them (``kafleet_lag_records``, ``kafleet_max_partition_lag_records``,
``kafleet_partitions_in_lag_status``, ...) are exported either way.

Counters come from the worker's own totals, so they reset when the worker restarts, as
Prometheus counters may.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from kafleet.sidecar.lag import STATUS_CODES, Status
from kafleet.sidecar.metrics import METRICS


@dataclass(frozen=True)
class View:
    """What one scrape shows: the state and the sidecar's judgements of it."""

    state: dict[str, Any] | None
    fresh: bool
    healthy: bool
    ready: bool
    lag_status: dict[str, Status]


def _lag(end: int | None, offset: int | None) -> int | None:
    if end is None or offset is None:
        return None
    return max(0, end - offset)


def _poll_age(state: dict[str, Any], now: float) -> float | None:
    """Seconds since the last poll at ``now``: the age the worker wrote plus the file's age."""
    since = state.get("seconds_since_poll")
    if since is None:
        return None
    written = state.get("written_at")
    return float(since) + (max(0.0, now - float(written)) if written is not None else 0.0)


def _families() -> dict[str, Any]:
    families: dict[str, Any] = {}
    for name, kind, labels, doc in METRICS:
        full = f"kafleet_{name}"
        if kind == "counter":
            families[name] = CounterMetricFamily(full.removesuffix("_total"), doc, labels=labels)
        elif kind == "histogram":
            families[name] = HistogramMetricFamily(full, doc, labels=labels)
        elif kind == "summary":
            families[name] = SummaryMetricFamily(full, doc, labels=labels)
        else:
            families[name] = GaugeMetricFamily(full, doc, labels=labels)
    return families


class StateCollector(Collector):
    """Every family of ``METRICS`` from one ``view()``; ``per_partition`` keeps ``partition_*``."""

    def __init__(self, view: Callable[[], View], per_partition: bool = True) -> None:
        self.view = view
        self.per_partition = per_partition

    def collect(self) -> Iterator[Metric]:
        view = self.view()
        state = view.state or {}
        group = str(state.get("group_id", ""))
        families = _families()

        def put(name: str, value: float | None, *labels: str) -> None:
            if value is not None:
                families[name].add_metric([group, *labels], float(value))

        put("state_fresh", int(view.fresh))
        put("healthy", int(view.healthy))
        put("ready", int(view.ready))
        if view.state is not None:
            put("poll_age_seconds", _poll_age(state, time.time()))
            put("assigned_partitions", len(state.get("assigned", [])))
            put("in_flight_records", state.get("in_flight"))
            put("max_poll_records", state.get("max_poll_records"))
            put("concurrency", state.get("concurrency"))
            self._partitions(view, state, put)
            self._histograms(state, group, families)
            for name, key in COUNTERS:
                put(name, state.get(key))
            sink = state.get("sink")
            if sink is not None:
                put("sink_batches_written_total", state.get("sink_batches"))
                put("sink_rows_written_total", state.get("sink_rows"))
                put("sink_write_failures_total", state.get("sink_write_failures"))
                put("sink_write_seconds_total", state.get("sink_write_seconds_sum"))
                put("sink_failing", int(bool(sink.get("failing_since"))))
            share = state.get("share")
            if share is not None:
                for name, key in SHARE_COUNTERS:
                    put(name, share.get(key))
                lags = [lag for lag in (share.get("lag") or {}).values() if lag is not None]
                put("share_group_lag_records", sum(lags) if lags else None)
            put("fetch_stalled_partitions", len(state.get("stalled_partitions") or {}))
            put("config_rejections_total", state.get("config_rejections"))
            put("config_rejected", int(state.get("config_rejected") is not None))
            revokes = state.get("revoke_seconds") or []
            put("last_revoke_drain_seconds", revokes[-1] if revokes else None)
        for name, family in families.items():
            if self.per_partition or not name.startswith("partition_"):
                yield family

    def _partitions(self, view: View, state: dict[str, Any], put: Callable[..., None]) -> None:
        """Each partition's families (when ``per_partition``) and the group's aggregates."""
        lags: list[int] = []
        queued, paused, oldest = 0, 0, 0.0
        statuses = dict.fromkeys(STATUS_CODES, 0)
        for key, part in sorted(state.get("partitions", {}).items()):
            end = part.get("log_end")
            lag = _lag(end, part.get("committed"))
            status = view.lag_status.get(key)
            lags += [lag] if lag is not None else []
            queued += int(part.get("queued") or 0)
            paused += int(bool(part.get("paused")))
            oldest = max(oldest, float(part.get("oldest_in_flight_s") or 0.0))
            if status is not None:
                statuses[status] += 1
            if not self.per_partition:
                continue
            tp = (str(part["topic"]), str(part["partition"]))
            put("partition_lag_records", lag, *tp)
            put("partition_position_lag_records", _lag(end, part.get("position")), *tp)
            put("partition_committed_offset", part.get("committed"), *tp)
            put("partition_position", part.get("position"), *tp)
            put("partition_log_end_offset", end, *tp)
            if status is not None:
                for candidate in STATUS_CODES:
                    put("partition_lag_status", int(candidate == status), *tp, candidate)
                put("partition_lag_status_code", STATUS_CODES[status], *tp)
            put("partition_queued_records", part.get("queued"), *tp)
            put("partition_queued_bytes", part.get("queued_bytes"), *tp)
            put("partition_paused", int(bool(part.get("paused"))), *tp)
            put("partition_in_flight_records", part.get("in_flight"), *tp)
            put("partition_oldest_in_flight_seconds", part.get("oldest_in_flight_s"), *tp)
            if "sink" in state:
                put("partition_held_records", part.get("held"), *tp)
        put("lag_records", sum(lags))
        put("max_partition_lag_records", max(lags, default=0))
        for status, count in statuses.items():
            put("partitions_in_lag_status", count, status)
        put("queued_records", queued)
        put("paused_partitions", paused)
        put("oldest_in_flight_seconds", oldest)

    @staticmethod
    def _histograms(state: dict[str, Any], group: str, families: dict[str, Any]) -> None:
        latency = state.get("handler_latency", {})
        if latency:
            cumulative, buckets = 0, []
            for bound, count in zip(latency["buckets"], latency["counts"], strict=False):
                cumulative += count
                buckets.append((repr(float(bound)), cumulative))
            buckets.append(("+Inf", sum(latency["counts"])))
            families["handler_latency_seconds"].add_metric([group], buckets, latency["sum"])
        commit = state.get("commit_latency", {})
        if commit:
            families["commit_latency_seconds"].add_metric(
                [group], commit.get("count", 0), commit.get("sum", 0.0)
            )


# (family, the state's key) of the counters and the plain gauges copied as they are
COUNTERS: list[tuple[str, str]] = [
    ("records_processed_total", "records_processed"),
    ("handler_failures_total", "records_failed"),
    ("records_retried_total", "retries"),
    ("records_dead_lettered_total", "dead_lettered"),
    ("commits_total", "commits"),
    ("commit_failures_total", "commit_failures"),
    ("rebalances_total", "rebalances"),
    ("partitions_revoked_total", "partitions_revoked_total"),
    ("partitions_lost_total", "partitions_lost_total"),
    ("offset_rewinds_total", "offset_rewinds"),
    ("fetch_stalls_total", "fetch_stalls"),
    ("fetch_restarts_total", "fetch_restarts"),
    ("fetch_stalls_recovered_total", "fetch_stalls_recovered"),
    ("abandoned_in_flight_records", "abandoned_in_flight"),
    ("pauses_total", "pauses"),
    ("resumes_total", "resumes"),
]

SHARE_COUNTERS: list[tuple[str, str]] = [
    ("share_records_acquired_total", "acquired"),
    ("share_records_redelivered_total", "redelivered"),
    ("share_records_accepted_total", "accepted"),
    ("share_records_released_total", "released"),
    ("share_records_rejected_total", "rejected"),
    ("share_records_archived_total", "archived"),
    ("share_acks_refused_total", "acks_refused"),
]
