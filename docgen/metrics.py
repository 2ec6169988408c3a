"""The metrics reference page: every family the sidecars and the operator export.

Owns: turning the sidecar's catalogue (``kafleet.sidecar.metrics.METRICS``: name, type, labels,
meaning; the collector exports exactly these) and the operator's families
(``kafleet_operator.reconcile.metrics.EXPORTED``, in its own registry) into one row each: the
name as a scrape shows it (a counter with ``_total``), its type, labels and help, with a
histogram's buckets. ``page()`` is the Markdown.

Does not own any metric or its values (the sidecar's ``collector.py``, the operator's
``metrics.py``), nor the dashboards or alerts built on them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from docgen import markdown

__all__ = ["Metric", "operator_metrics", "page", "sidecar_metrics"]


@dataclass(frozen=True)
class Metric:
    """One family as a scrape shows it."""

    name: str  # with _total for a counter
    type: str
    labels: tuple[str, ...]
    help: str


def exposed_name(name: str, kind: str) -> str:
    """A counter's samples end in ``_total`` (prometheus_client adds it to a bare name)."""
    return name if kind != "counter" or name.endswith("_total") else f"{name}_total"


def sidecar_metrics(catalogue: Iterable[tuple[str, str, Sequence[str], str]]) -> list[Metric]:
    """The sidecar's families from its catalogue: (name without ``kafleet_``, type, labels,
    meaning)."""
    return [
        Metric(exposed_name(f"kafleet_{name}", kind), kind, tuple(labels), doc)
        for name, kind, labels, doc in catalogue
    ]


def operator_metrics(families: Iterable[Any]) -> list[Metric]:
    """The operator's families from its prometheus_client metrics (``Counter``, ``Gauge``,
    ``Histogram``), in the order given; a histogram's help ends with its buckets."""
    out = []
    for family in families:
        kind = str(family._type)
        help_text = str(family._documentation)
        bounds = getattr(family, "_upper_bounds", None)
        if kind == "histogram" and bounds:
            finite = [f"{b:g}" for b in bounds if b != float("inf")]
            help_text += f" (buckets: {', '.join(finite)})"
        out.append(
            Metric(
                exposed_name(str(family._name), kind), kind, tuple(family._labelnames), help_text
            )
        )
    return out


def _table(metrics: Iterable[Metric]) -> str:
    return markdown.table(
        ["Metric", "Type", "Labels", "Help"],
        [
            [markdown.code(m.name), m.type, ", ".join(markdown.code(label) for label in m.labels),
             markdown.prose(m.help)]
            for m in metrics
        ],
    )  # fmt: skip


INTRO = """\
# Metrics

Every metric kafleet exports, generated at each build of this site from the code that exports
them: each worker pod's sidecar (`GET /metrics` on its port 9400, from the worker's state file)
and the operator (its own `/metrics`). Counters, histograms and summaries show their samples'
suffixes in a scrape (`_total`; `_bucket`, `_sum`, `_count`).
"""

SIDECAR = """\
## The sidecar's

Every series carries `group`, the Kafka group id. A Prometheus that scrapes the pods with the
chart's ServiceMonitor adds `namespace`, `pod` and `consumergroup` (the ConsumerGroup's name).
"""

PER_PARTITION = """\
### Per partition

Labelled `topic` and `partition` too. A ConsumerGroup with `partition_metrics: false` (the
sidecar's `--partition-metrics off`) leaves them out, for topics of hundreds of partitions; the
group's aggregates above are exported either way.
"""

OPERATOR = """\
## The operator's

A group's series carry `namespace` and `consumergroup` (the ConsumerGroup) and `group` (its
Kafka group id, the one label the sidecars' series carry), so a panel joins the two; scrape the
operator with `honorLabels`, or Prometheus renames its `namespace` to `exported_namespace`.
The operator's own (`build_info`, the shards, the clusters it reads) carry none of them.
"""


def page(sidecar: Sequence[Metric], operator: Sequence[Metric]) -> str:
    """The metrics reference page, Markdown."""
    group = [m for m in sidecar if not m.name.startswith("kafleet_partition_")]
    partition = [m for m in sidecar if m.name.startswith("kafleet_partition_")]
    parts = [INTRO, SIDECAR, "### Per group\n", _table(group)]
    if partition:
        parts += [PER_PARTITION, _table(partition)]
    parts += [OPERATOR, _table(operator)]
    return "\n".join(parts)


def build() -> str:
    """The page from the running code: the sidecar's catalogue and the operator's families."""
    from kafleet.sidecar.metrics import METRICS
    from kafleet_operator.reconcile import metrics as operator

    return page(sidecar_metrics(METRICS), operator_metrics(operator.EXPORTED))
