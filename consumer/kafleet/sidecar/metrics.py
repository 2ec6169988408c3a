"""Every metric the sidecar exports, all named ``kafleet_*``: the catalogue and its table.

Owns: ``METRICS``, each metric's name, type, labels (``group``, ``topic``, ``partition``,
``status``) and meaning, and the Markdown table made from it (``python -m
kafleet.sidecar.metrics`` prints it; the documentation site's Metrics page is generated from
``METRICS`` at each build). Does not own the values: turning a worker's state plus the
sidecar's judgements into metric families is ``collector.py``'s, serving them ``server.py``'s.

Names follow Prometheus' naming guide: the base unit last (``_seconds``, ``_bytes``, or what is
counted, ``_records``), ``_total`` on counters and on nothing else; ``promtool check metrics``
passes on the output (tests/sidecar/test_metrics.py).
"""

from __future__ import annotations

G, GTP, GS = ["group"], ["group", "topic", "partition"], ["group", "status"]

# name (without kafleet_), type, labels, meaning
METRICS: list[tuple[str, str, list[str], str]] = [
    ("state_fresh", "gauge", G, "1 if the worker's state is fresh, else 0"),
    ("healthy", "gauge", G, "1 if /healthz passes (polling, no record past processing_timeout_s)"),
    ("ready", "gauge", G, "1 if /readyz passes (in the group and polling)"),
    (
        "poll_age_seconds",
        "gauge",
        G,
        "seconds since the worker last polled Kafka, counted to the scrape (a worker that "
        "stopped writing its state ages)",
    ),
    ("assigned_partitions", "gauge", G, "partitions assigned to the worker"),
    ("in_flight_records", "gauge", G, "records in handlers now"),
    (
        "lag_records",
        "gauge",
        G,
        "the sum of the assigned partitions' lag (log-end minus committed)",
    ),
    ("max_partition_lag_records", "gauge", G, "the largest lag of an assigned partition"),
    (
        "partitions_in_lag_status",
        "gauge",
        GS,
        "assigned partitions in each lag status (OK, WARN, STALL, STOP, REWIND)",
    ),
    ("queued_records", "gauge", G, "records queued in all partitions, not yet started"),
    ("paused_partitions", "gauge", G, "partitions paused because their queue is full"),
    (
        "oldest_in_flight_seconds",
        "gauge",
        G,
        "how long the oldest in-flight record of any partition has been in its handler",
    ),
    ("max_poll_records", "gauge", G, "the effective max_poll_records (tuned live)"),
    ("concurrency", "gauge", G, "the effective concurrency (tuned live)"),
    ("partition_lag_records", "gauge", GTP, "log-end offset minus the committed offset"),
    (
        "partition_position_lag_records",
        "gauge",
        GTP,
        "log-end offset minus the position (the lowest offset not yet done)",
    ),
    ("partition_committed_offset", "gauge", GTP, "the committed offset"),
    ("partition_position", "gauge", GTP, "the lowest offset not yet done"),
    ("partition_log_end_offset", "gauge", GTP, "the log-end offset (librdkafka statistics)"),
    (
        "partition_lag_status",
        "gauge",
        [*GTP, "status"],
        "1 for the partition's lag status judged like Burrow: OK, WARN, STALL, STOP, REWIND",
    ),
    (
        "partition_lag_status_code",
        "gauge",
        GTP,
        "the same as a number: 0 OK, 1 WARN, 2 STALL, 3 STOP, 4 REWIND",
    ),
    ("partition_queued_records", "gauge", GTP, "records queued, not yet started"),
    ("partition_queued_bytes", "gauge", GTP, "bytes of the values queued"),
    ("partition_paused", "gauge", GTP, "1 if the partition is paused (its queue is full)"),
    ("partition_in_flight_records", "gauge", GTP, "records of the partition in handlers now"),
    (
        "partition_oldest_in_flight_seconds",
        "gauge",
        GTP,
        "how long the partition's oldest in-flight record has been in its handler",
    ),
    (
        "abandoned_in_flight_records",
        "gauge",
        G,
        "records of partitions no longer assigned still in their handlers (they hold threads)",
    ),
    ("handler_latency_seconds", "histogram", G, "time a record spent in its handler, retries in"),
    ("records_processed_total", "counter", G, "records handled successfully"),
    ("handler_failures_total", "counter", G, "handler attempts that raised"),
    ("records_retried_total", "counter", G, "retries scheduled"),
    ("records_dead_lettered_total", "counter", G, "records sent to the dead-letter topic"),
    ("commits_total", "counter", G, "offset commits acknowledged"),
    ("commit_failures_total", "counter", G, "offset commits that failed (retried later)"),
    ("commit_latency_seconds", "summary", G, "time from sending a commit to its acknowledgement"),
    ("rebalances_total", "counter", G, "assignments and revocations"),
    ("partitions_revoked_total", "counter", G, "partitions revoked"),
    ("partitions_lost_total", "counter", G, "partitions lost (nothing committed for them)"),
    (
        "offset_rewinds_total",
        "counter",
        G,
        "partitions whose position went back (log truncation, offset reset); tracking restarted",
    ),
    (
        "fetch_stalled_partitions",
        "gauge",
        G,
        "assigned partitions that fetch nothing: not paused by kafleet, behind their log end, no "
        "record for fetch_stall_timeout_ms (librdkafka#5586); /readyz names them",
    ),
    (
        "fetch_stalls_total",
        "counter",
        G,
        "partitions found fetching nothing while behind their log end",
    ),
    (
        "fetch_restarts_total",
        "counter",
        G,
        "fetches the worker restarted itself on such partitions (a seek, or a re-assignment of "
        "that partition alone)",
    ),
    (
        "fetch_stalls_recovered_total",
        "counter",
        G,
        "stalled partitions that flowed again without a restart of the worker",
    ),
    ("last_revoke_drain_seconds", "gauge", G, "how long the last revoke drained its partitions"),
    ("pauses_total", "counter", G, "partition pauses for back-pressure"),
    ("resumes_total", "counter", G, "partition resumes"),
    (
        "partition_held_records",
        "gauge",
        GTP,
        "results done and waiting for the sink to write their batch",
    ),
    ("sink_batches_written_total", "counter", G, "batches the sink (Spark) wrote"),
    ("sink_rows_written_total", "counter", G, "rows in the batches the sink wrote"),
    ("sink_write_failures_total", "counter", G, "failed batch writes (each is retried)"),
    ("sink_write_seconds_total", "counter", G, "time spent in successful batch writes"),
    (
        "sink_failing",
        "gauge",
        G,
        "1 while the sink fails every write (the worker is unready, commits wait)",
    ),
    (
        "share_records_acquired_total",
        "counter",
        G,
        "share groups: records the worker's share consumers acquired (locked to it)",
    ),
    (
        "share_records_redelivered_total",
        "counter",
        G,
        "share groups: acquired records delivered before (released, or their lock ran out)",
    ),
    ("share_records_accepted_total", "counter", G, "share groups: records acknowledged ACCEPT"),
    (
        "share_records_released_total",
        "counter",
        G,
        "share groups: records acknowledged RELEASE (delivered again, to any member)",
    ),
    (
        "share_records_rejected_total",
        "counter",
        G,
        "share groups: records acknowledged REJECT (dead-lettered with dead_letter_ack reject)",
    ),
    (
        "share_records_archived_total",
        "counter",
        G,
        "share groups: records the broker archived unprocessed (released, or their lock lost, "
        "on their last delivery): should stay 0",
    ),
    (
        "share_acks_refused_total",
        "counter",
        G,
        "share groups: acknowledgements the broker refused (the record's lock had run out)",
    ),
    (
        "share_group_lag_records",
        "gauge",
        G,
        "share groups: the group's lag (records neither acknowledged nor archived), as the "
        "broker reports it (KIP-1226); group-wide, the same in every worker: take max, not sum",
    ),
    (
        "config_rejections_total",
        "counter",
        G,
        "changes of the watched config file that were rejected (the running configuration "
        "stayed; /status says why in config_rejected)",
    ),
    (
        "config_rejected",
        "gauge",
        G,
        "1 while the watched config file holds a rejected change (a later good one clears it)",
    ),
]


def markdown() -> str:
    """The metrics reference as a Markdown table."""
    lines = ["| metric | type | labels | meaning |", "| --- | --- | --- | --- |"]
    for name, kind, labels, doc in METRICS:
        lines.append(f"| `kafleet_{name}` | {kind} | {', '.join(labels)} | {doc} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown())
