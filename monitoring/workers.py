"""The worker drill-down: one ConsumerGroup's pods and partitions, from the workers' sidecars.

Answers: is each worker healthy and polling; where the lag is and how Burrow judges each
partition; what is queued, paused and in the handlers; how long handlers take (percentiles),
how often they fail, retry and dead-letter; how commits, rebalances and revoke drains go; and
whether the sink (Spark) writes. Does not show the operator's view of the group (``fleet.py``).
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.models.dashboard import Dashboard

from monitoring.panels import (
    GROUP,
    PARTITION,
    RATE,
    WORKER,
    AnyPanel,
    Query,
    dashboard,
    datasource_variable,
    label_variable,
    series,
    states,
)

UID = "kafleet-workers"
POD = "{{pod}}"
TOPIC_PARTITION = "{{pod}} {{topic}}[{{partition}}]"
# Burrow's statuses as kafleet_partition_lag_status_code has them.
LAG_STATUSES = {
    0: ("OK", "green"),
    1: ("WARN", "yellow"),
    2: ("STALL", "orange"),
    3: ("STOP", "red"),
    4: ("REWIND", "purple"),
}


def _rate(family: str) -> str:
    """A counter's rate per second, per pod."""
    return f"sum by (pod) (rate({family}{{{WORKER}}}[{RATE}]))"


def _per_pod(title: str, description: str, unit: str, family: str, **kw: bool) -> AnyPanel:
    """A counter's rate per pod, or a gauge per pod (``family`` without ``_total``)."""
    expr = _rate(family) if family.endswith("_total") else f"{family}{{{WORKER}}}"
    return series(title, description, unit, Query(expr, POD), **kw)


def build() -> Dashboard:
    board = (
        dashboard(
            UID,
            "kafleet / Workers",
            "One ConsumerGroup's worker pods and partitions: health, lag and Burrow status, "
            "queues, handlers, commits, rebalances and the sink.",
        )
        .with_variable(datasource_variable())
        .with_variable(
            label_variable("namespace", "Namespace", "label_values(kafleet_ready, namespace)")
        )
        .with_variable(
            label_variable(
                "consumergroup",
                "ConsumerGroup",
                'label_values(kafleet_ready{namespace=~"$namespace"}, consumergroup)',
            )
        )
        .with_variable(label_variable("pod", "Pod", f"label_values(kafleet_ready{{{GROUP}}}, pod)"))
        .with_variable(
            label_variable(
                "topic", "Topic", f"label_values(kafleet_partition_lag_records{{{WORKER}}}, topic)"
            )
        )
    )
    rows: dict[str, list[AnyPanel]] = {
        "Health": [
            series(
                "Healthy and ready",
                "1 while a worker's /healthz passes (polling, no record past "
                "processing_timeout_s) and its /readyz (in the group and polling).",
                "short",
                Query(f"kafleet_healthy{{{WORKER}}}", f"{POD} healthy"),
                Query(f"kafleet_ready{{{WORKER}}}", f"{POD} ready"),
            ),
            _per_pod(
                "Since the last poll",
                "Seconds since each worker last polled Kafka: it climbs when the Poller is stuck "
                "(the group evicts a member past max.poll.interval.ms).",
                "s",
                "kafleet_poll_age_seconds",
            ),
            _per_pod(
                "Assigned partitions",
                "Partitions each worker holds.",
                "short",
                "kafleet_assigned_partitions",
            ),
            series(
                "Configuration",
                "The concurrency and max_poll_records each worker runs with (tuned live), and 1 "
                "while its watched config file holds a change it rejected (/status says why).",
                "short",
                Query(f"kafleet_concurrency{{{WORKER}}}", f"{POD} concurrency"),
                Query(f"kafleet_max_poll_records{{{WORKER}}}", f"{POD} max_poll_records"),
                Query(f"kafleet_config_rejected{{{WORKER}}}", f"{POD} config rejected"),
            ),
        ],
        "Partitions": [
            series(
                "Lag by partition",
                "Log-end minus committed offset of each assigned partition.",
                "short",
                Query(f"kafleet_partition_lag_records{{{PARTITION}}}", TOPIC_PARTITION),
            ),
            series(
                "Queued by partition",
                "Records fetched and waiting in each partition's work queue; a full queue "
                "pauses its partition.",
                "short",
                Query(f"kafleet_partition_queued_records{{{PARTITION}}}", TOPIC_PARTITION),
            ),
            states(
                "Lag status (Burrow)",
                "Each partition's lag judged as Burrow does, over the window: OK; WARN, lag "
                "growing; STALL, committing without progress; STOP, not committing with lag; "
                "REWIND, the committed offset went back.",
                LAG_STATUSES,
                Query(f"kafleet_partition_lag_status_code{{{PARTITION}}}", TOPIC_PARTITION),
            ),
            series(
                "Paused partitions",
                "Partitions paused because their queue is full (back-pressure), per worker, and "
                "pauses and resumes per second; and partitions that fetch nothing though behind "
                "their log end and not paused (librdkafka#5586: the worker restarts their fetch).",
                "short",
                Query(f"kafleet_paused_partitions{{{WORKER}}}", f"{POD} paused"),
                Query(f"kafleet_fetch_stalled_partitions{{{WORKER}}}", f"{POD} not fetching"),
                Query(
                    _rate("kafleet_pauses_total"),
                    f"{POD} pauses/s",
                ),
                Query(
                    _rate("kafleet_resumes_total"),
                    f"{POD} resumes/s",
                ),
            ),
            series(
                "In flight",
                "Records in handlers now, per partition, and those of partitions no longer "
                "assigned that still hold a thread.",
                "short",
                Query(f"kafleet_partition_in_flight_records{{{PARTITION}}}", TOPIC_PARTITION),
                Query(f"kafleet_abandoned_in_flight_records{{{WORKER}}}", f"{POD} abandoned"),
            ),
            series(
                "Oldest in flight",
                "How long each partition's oldest record has been in its handler: past "
                "processing_timeout_s the worker turns unhealthy.",
                "s",
                Query(
                    f"kafleet_partition_oldest_in_flight_seconds{{{PARTITION}}}", TOPIC_PARTITION
                ),
            ),
        ],
        "Handlers": [
            series(
                "Handler latency",
                "Time a record spends in its handler, retries included: percentiles over the "
                "pods shown.",
                "s",
                *(
                    Query(
                        f"histogram_quantile({q}, sum by (le) "
                        f"(rate(kafleet_handler_latency_seconds_bucket{{{WORKER}}}[{RATE}])))",
                        f"p{round(q * 100)}",
                    )
                    for q in (0.5, 0.95, 0.99)
                ),
            ),
            _per_pod(
                "Records handled",
                "Records handled successfully per second.",
                "rps",
                "kafleet_records_processed_total",
            ),
            series(
                "Failures, retries and dead letters",
                "Handler attempts that raised, retries scheduled, and records sent to the "
                "dead-letter topic, per second.",
                "rps",
                Query(
                    _rate("kafleet_handler_failures_total"),
                    f"{POD} failed",
                ),
                Query(
                    _rate("kafleet_records_retried_total"),
                    f"{POD} retried",
                ),
                Query(
                    _rate("kafleet_records_dead_lettered_total"),
                    f"{POD} dead-lettered",
                ),
            ),
        ],
        "Commits and rebalances": [
            series(
                "Commits",
                "Offset commits acknowledged and failed (retried later) per second.",
                "ops",
                Query(_rate("kafleet_commits_total"), f"{POD} ok"),
                Query(
                    _rate("kafleet_commit_failures_total"),
                    f"{POD} failed",
                ),
            ),
            series(
                "Commit latency",
                "The mean time from sending a commit to its acknowledgement.",
                "s",
                Query(
                    _rate("kafleet_commit_latency_seconds_sum") + " "
                    "/ " + _rate("kafleet_commit_latency_seconds_count"),
                    POD,
                ),
            ),
            series(
                "Rebalances",
                "Assignments and revocations, partitions revoked and lost (lost: nothing "
                "committed for them), and offset rewinds, per interval.",
                "short",
                *(
                    Query(
                        f"sum by (pod) (increase(kafleet_{family}_total{{{WORKER}}}[{RATE}]))",
                        f"{POD} {what}",
                    )
                    for family, what in (
                        ("rebalances", "rebalances"),
                        ("partitions_revoked", "revoked"),
                        ("partitions_lost", "lost"),
                        ("offset_rewinds", "rewinds"),
                    )
                ),
                bars=True,
            ),
            _per_pod(
                "Last revoke drain",
                "How long each worker's last revoke took to drain the revoked partitions' "
                "records (bounded by drain_timeout_s).",
                "s",
                "kafleet_last_revoke_drain_seconds",
            ),
        ],
        "Sink": [
            series(
                "Sink writes",
                "Rows and batches the sink (Spark) wrote per second.",
                "rps",
                Query(
                    _rate("kafleet_sink_rows_written_total"),
                    f"{POD} rows",
                ),
                Query(
                    _rate("kafleet_sink_batches_written_total"),
                    f"{POD} batches",
                ),
            ),
            series(
                "Sink failures",
                "Failed batch writes per second (each is retried), and 1 while the sink fails "
                "every write (the worker is unready and its commits wait).",
                "short",
                Query(
                    _rate("kafleet_sink_write_failures_total"),
                    f"{POD} failures/s",
                ),
                Query(f"kafleet_sink_failing{{{WORKER}}}", f"{POD} failing"),
            ),
            series(
                "Sink write time",
                "The mean time of a successful batch write.",
                "s",
                Query(
                    _rate("kafleet_sink_write_seconds_total") + " "
                    "/ " + _rate("kafleet_sink_batches_written_total"),
                    POD,
                ),
            ),
            series(
                "Held for the sink",
                "Results done and waiting for their batch to be written, per partition: their "
                "offsets are committed once it is.",
                "short",
                Query(f"kafleet_partition_held_records{{{PARTITION}}}", TOPIC_PARTITION),
            ),
        ],
    }
    for title, panels in rows.items():
        board = board.with_row(dash.Row(title))
        for panel in panels:
            board = board.with_panel(panel)
    return board.build()
