"""The fleet overview: every ConsumerGroup at a glance, from the operator's series (what it read
and decided) and the workers' (what they do), and the operator's own health.

Answers, per group: is it keeping up (lag, time lag, records in against records out), how many
replicas it wants and has, when it scaled or re-tuned and to what ``max_poll_records``, how its
partitions stand (Burrow's statuses), and whether the operator's passes and reconciles succeed.
Does not show one pod or partition: that is the worker drill-down (``workers.py``).
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.models.dashboard import Dashboard

from monitoring.panels import (
    GROUP,
    RATE,
    Query,
    dashboard,
    datasource_variable,
    label_variable,
    series,
    single,
)

UID = "kafleet-fleet"
BY_GROUP = "namespace, consumergroup"
NAMED = "{{namespace}}/{{consumergroup}}"


def build() -> Dashboard:
    board = (
        dashboard(
            UID,
            "kafleet / Fleet",
            "Every kafleet ConsumerGroup: lag, throughput, replicas, scaling and tuning, and the "
            "operator's own health.",
        )
        .with_variable(datasource_variable())
        .with_variable(
            label_variable(
                "namespace",
                "Namespace",
                "label_values(kafleet_operator_replicas_desired, namespace)",
            )
        )
        .with_variable(
            label_variable(
                "consumergroup",
                "ConsumerGroup",
                'label_values(kafleet_operator_replicas_desired{namespace=~"$namespace"}, '
                "consumergroup)",
            )
        )
    )
    board = board.with_row(dash.Row("Groups"))
    for panel in (
        single(
            "Lag",
            "The groups' lag in records (log-end minus committed), as status.lag.",
            "short",
            Query(f"sum(kafleet_operator_lag_records{{{GROUP}}})", "lag"),
        ),
        single(
            "Worst time lag",
            "The longest estimated time lag of a group: how far behind its input it is.",
            "s",
            Query(f"max(kafleet_operator_time_lag_seconds{{{GROUP}}})", "time lag"),
        ),
        single(
            "Replicas ready / desired",
            "Ready worker pods and the replicas the groups ask for.",
            "short",
            Query(f"sum(kafleet_operator_replicas_ready{{{GROUP}}})", "ready"),
            Query(f"sum(kafleet_operator_replicas_desired{{{GROUP}}})", "desired"),
        ),
        single(
            "Unhealthy workers",
            "Workers whose /healthz fails (not polling, or a record past processing_timeout_s).",
            "short",
            Query(f"count(kafleet_healthy{{{GROUP}}} == 0) or vector(0)", "unhealthy"),
        ),
        series(
            "Lag",
            "Each group's lag in records, as the operator reads it from Kafka.",
            "short",
            Query(f"kafleet_operator_lag_records{{{GROUP}}}", NAMED),
        ),
        series(
            "Time lag",
            "Each group's estimated time lag: the lag divided by the rate it is consumed at.",
            "s",
            Query(f"kafleet_operator_time_lag_seconds{{{GROUP}}}", NAMED),
        ),
        series(
            "Records in and out",
            "In: the rate the groups' partitions grow (log-end offsets). Out: records handled "
            "and dead-lettered. Out below in for long is lag building up.",
            "rps",
            Query(
                f"sum by ({BY_GROUP}) (rate(kafleet_partition_log_end_offset{{{GROUP}}}[{RATE}]))",
                f"{NAMED} in",
            ),
            Query(
                f"sum by ({BY_GROUP}) (rate(kafleet_records_processed_total{{{GROUP}}}[{RATE}]) "
                f"+ rate(kafleet_records_dead_lettered_total{{{GROUP}}}[{RATE}]))",
                f"{NAMED} out",
            ),
        ),
        series(
            "Replicas",
            "The replicas each group asks for (the autoscaler's last decision, or the spec's) "
            "and the ready ones.",
            "short",
            Query(f"kafleet_operator_replicas_desired{{{GROUP}}}", f"{NAMED} desired"),
            Query(f"kafleet_operator_replicas_ready{{{GROUP}}}", f"{NAMED} ready"),
        ),
        series(
            "Scale and tuning events",
            "Replicas written by the autoscaler, by direction, and max_poll_records changes the "
            "tuner made (the ConsumerGroup's Events give the reasons).",
            "short",
            Query(
                f"sum by ({BY_GROUP}, direction) "
                f"(increase(kafleet_operator_scale_events_total{{{GROUP}}}[{RATE}]))",
                f"{NAMED} scale {{{{direction}}}}",
            ),
            Query(
                f"sum by ({BY_GROUP}) "
                f"(increase(kafleet_operator_tuning_changes_total{{{GROUP}}}[{RATE}]))",
                f"{NAMED} tuning",
            ),
            bars=True,
        ),
        series(
            "max.poll.records",
            "What the operator gives the workers (tuned or the spec's), and what each worker "
            "applies: they differ for as long as the kubelet takes to update the ConfigMap.",
            "short",
            Query(f"kafleet_operator_max_poll_records{{{GROUP}}}", f"{NAMED} given"),
            Query(
                f"max by ({BY_GROUP}) (kafleet_max_poll_records{{{GROUP}}})",
                f"{NAMED} applied",
            ),
        ),
        series(
            "Partitions by lag status",
            "The groups' partitions in each of Burrow's statuses: OK, WARN (lag growing), STALL "
            "(committing without progress), STOP (not committing), REWIND (offsets went back).",
            "short",
            Query(
                f"sum by ({BY_GROUP}, status) (kafleet_partitions_in_lag_status{{{GROUP}}})",
                f"{NAMED} {{{{status}}}}",
            ),
        ),
        series(
            "Workers healthy and ready",
            "Worker pods passing /healthz and /readyz.",
            "short",
            Query(f"sum by ({BY_GROUP}) (kafleet_healthy{{{GROUP}}})", f"{NAMED} healthy"),
            Query(f"sum by ({BY_GROUP}) (kafleet_ready{{{GROUP}}})", f"{NAMED} ready"),
        ),
    ):
        board = board.with_panel(panel)
    board = board.with_row(dash.Row("Operator"))
    for panel in (
        series(
            "Passes by result",
            "The operator's periodic passes over each group (read lag and sidecars, decide, "
            "write status); an error is a pass that raised (see the operator's log).",
            "ops",
            Query(
                f"sum by ({BY_GROUP}, result) "
                f"(rate(kafleet_operator_passes_total{{{GROUP}}}[{RATE}]))",
                f"{NAMED} {{{{result}}}}",
            ),
        ),
        series(
            "Pass duration",
            "How long a pass over a group takes, percentiles over every group shown.",
            "s",
            *(
                Query(
                    f"histogram_quantile({q}, sum by (le) "
                    f"(rate(kafleet_operator_pass_duration_seconds_bucket{{{GROUP}}}[{RATE}])))",
                    f"p{round(q * 100)}",
                )
                for q in (0.5, 0.95, 0.99)
            ),
        ),
        series(
            "Reconciles by result",
            "Creates, updates and resumes of the groups' specs: applied, refused by the API "
            "server, invalid (the Degraded condition names the field) or paused.",
            "short",
            Query(
                f"sum by ({BY_GROUP}, result) "
                f"(increase(kafleet_operator_reconciles_total{{{GROUP}}}[{RATE}]))",
                f"{NAMED} {{{{result}}}}",
            ),
            bars=True,
        ),
        series(
            "Lag read failures",
            "Passes that could not read a group's lag from Kafka (status.conditions Degraded "
            "says why); the lag panels show no value meanwhile.",
            "short",
            Query(
                f"sum by ({BY_GROUP}) "
                f"(increase(kafleet_operator_lag_read_failures_total{{{GROUP}}}[{RATE}]))",
                NAMED,
            ),
            bars=True,
        ),
        series(
            "Kafka reads",
            "One read of a Kafka cluster serves every group on it (one client per cluster): how "
            "long it takes, which must stay well under the pass interval.",
            "s",
            *(
                Query(
                    f"histogram_quantile({q}, sum by (le) "
                    f"(rate(kafleet_operator_kafka_read_duration_seconds_bucket[{RATE}])))",
                    f"p{round(q * 100)}",
                )
                for q in (0.5, 0.99)
            ),
        ),
        series(
            "Status writes",
            "Status patches by the periodic passes, over all groups: only news (a condition, "
            "a decision, a count) and the moving lag figures every 30 s; a fleet at rest "
            "writes none.",
            "ops",
            Query(f"sum(rate(kafleet_operator_status_writes_total[{RATE}]))", "writes"),
        ),
        series(
            "Operators running",
            "Operator processes scraped, by version (0 is an operator down).",
            "short",
            Query("count by (version) (kafleet_operator_build_info)", "{{version}}"),
        ),
        series(
            "Shards led",
            "The shards the groups are split into, and how many the operator pods lead: below "
            "the line, a shard has no leader and its groups are left as they are.",
            "short",
            Query("max(kafleet_operator_shards)", "shards"),
            Query("sum(kafleet_operator_shards_led)", "led"),
        ),
    ):
        board = board.with_panel(panel)
    return board.build()
