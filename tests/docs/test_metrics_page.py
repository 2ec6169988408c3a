"""The metrics page lists every family the sidecars and the operator export, as a scrape
shows them, with their type, labels and help."""

from __future__ import annotations

from prometheus_client import Counter, Histogram
from prometheus_client.registry import CollectorRegistry

from docgen import metrics
from kafleet.sidecar.collector import StateCollector, View
from kafleet_operator.reconcile.metrics import REGISTRY
from tests.docs.pages import row


def scraped_name(name: str, kind: str) -> str:
    return f"{name}_total" if kind == "counter" else name


def test_every_family_the_sidecar_exports_is_on_the_page() -> None:
    text = metrics.build()
    collector = StateCollector(lambda: View(None, False, False, False, {}))

    families = list(collector.collect())

    assert len(families) > 50
    for family in families:
        assert f"| `{scraped_name(family.name, family.type)}` | {family.type} |" in text


def test_every_family_of_the_operator_s_registry_is_on_the_page() -> None:
    text = metrics.build()

    families = list(REGISTRY.collect())

    assert len(families) > 15
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
