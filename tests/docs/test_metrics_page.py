"""The metrics page lists every family the sidecars and the operator export, as a scrape
shows them, with their type, labels and help."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from prometheus_client import Counter, Histogram
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import CollectorRegistry

from docgen import metrics
from kafleet.sidecar.collector import StateCollector, View
from kafleet_operator.reconcile.metrics import REGISTRY
from tests.docs.pages import row


def scraped_name(name: str, kind: str) -> str:
    return f"{name}_total" if kind == "counter" else name


def sidecar_families() -> list[Metric]:
    return list(StateCollector(lambda: View(None, False, False, False, {})).collect())


def operator_families() -> list[Metric]:
    return list(REGISTRY.collect())


@pytest.mark.parametrize(
    ("exported", "at_least"),
    [(sidecar_families, 50), (operator_families, 15)],
    ids=["sidecar", "operator"],
)
def test_every_family_exported_is_on_the_page(
    exported: Callable[[], list[Metric]], at_least: int
) -> None:
    text = metrics.build()

    families = exported()

    assert len(families) > at_least
    for family in families:
        assert f"| `{scraped_name(family.name, family.type)}` | {family.type} |" in text


def test_labels_are_listed_and_per_partition_families_have_their_own_table() -> None:
    text = metrics.build()
    per_partition = text.split("### Per partition", 1)[1].split("## The operator's", 1)[0]

    assert "`group`, `topic`, `partition`" in row(per_partition, "`kafleet_partition_lag_records`")
    assert "`kafleet_partition_lag_records`" not in text.split("### Per partition", 1)[0]
    assert "`result`" in row(text, "`kafleet_operator_passes_total`")


def test_a_counter_is_named_as_scraped_and_a_histogram_shows_its_buckets() -> None:
    registry = CollectorRegistry()
    reads = Counter("app_reads", "reads done", ["topic"], registry=registry)
    took = Histogram("app_read_seconds", "read time", buckets=(0.1, 1), registry=registry)

    found = metrics.operator_metrics([reads, took])

    assert found[0] == metrics.Metric("app_reads_total", "counter", ("topic",), "reads done")
    assert found[1].help == "read time (buckets: 0.1, 1)"
