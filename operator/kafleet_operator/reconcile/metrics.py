"""The operator's own Prometheus metrics: what it saw of each ConsumerGroup and what it did.

Owns: the families (``EXPORTED``, a registry of their own, so nothing else a library
registers leaks into them), the series of one group (``Series``: its counters made at its first
pass, at 0, so a panel shows 0 rather than "No data"; its gauges once their value is known, the
lag withdrawn while it cannot be read; removed when the group is gone, through the memo's
``close``, which ``periodic.forget`` calls, unless a group made again under the same name owns
them by then), the reconciles of each group's spec (``reconciled``: applied, refused by the API
server, invalid, paused), the operator's own ``build_info``, and serving ``/metrics``
(``serve``). Each series carries ``namespace`` and ``consumergroup`` (the ConsumerGroup) and
``group`` (its Kafka group id, the one label the workers' series carry), so panels join the
two; a Prometheus that scrapes the operator's pod keeps them with ``honor_labels`` (else its
own ``namespace`` target label renames them ``exported_namespace``).

Does not own what a pass does (``observer.py``) or any decision: it records them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from kafleet import __version__

REGISTRY = CollectorRegistry(auto_describe=True)
LABELS = ("namespace", "consumergroup", "group")
# Always 1 while the operator runs: an alert on its absence sees an operator down even when no
# ConsumerGroup exists (every other family has series only per group).
BUILD_INFO = Gauge(
    "kafleet_operator_build_info",
    "1, labelled with the running operator's version",
    ["version"],
    registry=REGISTRY,
)
BUILD_INFO.labels(__version__).set(1)
# What a create, update or resume of a group's spec came to: its objects applied, refused by the
# API server (or held by an owner other than the group), its spec invalid, or reconciliation
# paused. Labelled without the Kafka group id: an invalid spec may have none.
RECONCILE_RESULTS = ("applied", "refused", "invalid", "paused")
RECONCILES = Counter(
    "kafleet_operator_reconciles",
    "reconciles of a group's spec (create, update, resume), by result",
    ["namespace", "consumergroup", "result"],
    registry=REGISTRY,
)

PASSES = Counter(
    "kafleet_operator_passes",
    "periodic passes over a group, by result (error: the pass raised, see the log; at_rest: "
    "the inputs of the last pass, which found the group at rest, compared and found the same)",
    [*LABELS, "result"],
    registry=REGISTRY,
)
PASS_SECONDS = Histogram(
    "kafleet_operator_pass_duration_seconds",
    "how long one pass over a group took (reading lag, sidecars, writing status)",
    LABELS,
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=REGISTRY,
)
LAG = Gauge(
    "kafleet_operator_lag_records",
    "the group's lag read from Kafka (log-end minus committed), as status.lag",
    LABELS,
    registry=REGISTRY,
)
TIME_LAG = Gauge(
    "kafleet_operator_time_lag_seconds",
    "the group's estimated time lag, as status.timeLagSeconds",
    LABELS,
    registry=REGISTRY,
)
LAG_FAILURES = Counter(
    "kafleet_operator_lag_read_failures",
    "passes whose lag could not be read (status.conditions Degraded says why)",
    LABELS,
    registry=REGISTRY,
)
DESIRED = Gauge(
    "kafleet_operator_replicas_desired",
    "the replicas the group's Deployment is given: the spec's (the autoscaler's last "
    "decision), or the count a kafleet.io/paused-replicas annotation holds it at",
    LABELS,
    registry=REGISTRY,
)
PAUSED = Gauge(
    "kafleet_operator_paused",
    "1 while the group is paused by annotation (paused-replicas or pause-reconciliation), else 0",
    LABELS,
    registry=REGISTRY,
)
READY = Gauge(
    "kafleet_operator_replicas_ready", "the Deployment's ready replicas", LABELS, registry=REGISTRY
)
SCALES = Counter(
    "kafleet_operator_scale_events",
    "replicas written by the autoscaler, by direction (the Events give the reason)",
    [*LABELS, "direction"],
    registry=REGISTRY,
)
MAX_POLL_RECORDS = Gauge(
    "kafleet_operator_max_poll_records",
    "the max_poll_records the operator gives the workers (tuned or the spec's)",
    LABELS,
    registry=REGISTRY,
)
TUNINGS = Counter(
    "kafleet_operator_tuning_changes",
    "max_poll_records changes the tuner wrote to the group's ConfigMap",
    LABELS,
    registry=REGISTRY,
)
# The operator as a whole: how many clusters it reads (one Kafka client each, in a process of
# its own), how long a read of a cluster takes (every group of it at once), and how often it
# writes a group's status (only when something changed: a fleet at rest writes none).
KAFKA_CLUSTERS = Gauge(
    "kafleet_operator_kafka_clusters",
    "Kafka clusters read, one client each (groups that connect the same way share one)",
    registry=REGISTRY,
)
KAFKA_READ_SECONDS = Histogram(
    "kafleet_operator_kafka_read_duration_seconds",
    "how long one read of a cluster's offsets took, for all its groups at once",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=REGISTRY,
)
# Summed over the operator's pods, SHARDS_LED falls short of SHARDS while a shard has no leader.
SHARDS = Gauge(
    "kafleet_operator_shards",
    "shards the groups are split into (kafleet operator --shards; 1 with no shards: this pod "
    "is the only operator)",
    registry=REGISTRY,
)
SHARDS_LED = Gauge(
    "kafleet_operator_shards_led",
    "shards of ConsumerGroups this operator pod leads now",
    registry=REGISTRY,
)
SHARDS.set(1)
SHARDS_LED.set(1)
STATUS_WRITES = Counter(
    "kafleet_operator_status_writes",
    "status patches of ConsumerGroups by the periodic pass (a group at rest gets none)",
    registry=REGISTRY,
)
FAMILIES = (
    PASSES, PASS_SECONDS, LAG, TIME_LAG, LAG_FAILURES, DESIRED, PAUSED, READY, SCALES,
    MAX_POLL_RECORDS, TUNINGS,
)  # fmt: skip
# Every family a dashboard or an alert may read.
EXPORTED = (
    BUILD_INFO,
    RECONCILES,
    KAFKA_CLUSTERS,
    KAFKA_READ_SECONDS,
    STATUS_WRITES,
    SHARDS,
    SHARDS_LED,
    *FAMILIES,
)
# Counted from a group's first pass, so "none yet" reads 0 rather than "No data". The gauges
# have a series only once their value is known: a lag never read is absent, not 0, so an alert
# on absent lag fires and one on high lag is not silenced by a made-up 0.
_COUNTED: dict[Any, tuple[tuple[str, ...], ...]] = {
    PASSES: (("ok",), ("error",), ("at_rest",)),
    PASS_SECONDS: ((),),
    LAG_FAILURES: ((),),
    SCALES: (("up",), ("down",)),
    TUNINGS: ((),),
}
# Whose series each label set is: a group deleted and made again under the same name has new
# series before the old memo's close runs, and that close must leave them alone.
_OWNERS: dict[tuple[str, ...], Series] = {}


class Series:
    """One group's series; ``close`` removes them all (the group is gone)."""

    def __init__(self, namespace: str, name: str, group: str) -> None:
        self.labels = (namespace, name, group)
        # Each family's child for these labels, looked up once (a pass sets six of them: a
        # lookup takes the family's lock and hashes the labels); dropped where one is removed.
        self._children: dict[tuple[Any, tuple[str, ...]], Any] = {}
        _OWNERS[self.labels] = self
        for family, children in _COUNTED.items():
            for extra in children:
                family.labels(*self.labels, *extra)
        for result in RECONCILE_RESULTS:
            RECONCILES.labels(namespace, name, result)

    def passed(
        self,
        status: Mapping[str, Any],
        seconds: float,
        ok: bool,
        desired: object = None,
        paused: bool | None = None,
    ) -> None:
        """One pass: its result and time, the replicas the Deployment is given, whether the
        group is paused, and the figures it wrote to the status."""
        self._child(PASSES, "ok" if ok else "error").inc()
        self._child(PASS_SECONDS).observe(seconds)
        if isinstance(desired, int) and not isinstance(desired, bool):
            self._child(DESIRED).set(desired)
        if paused is not None:
            self._child(PAUSED).set(int(paused))
        for gauge, key in (
            (LAG, "lag"),
            (TIME_LAG, "timeLagSeconds"),
            (READY, "readyReplicas"),
            (MAX_POLL_RECORDS, "maxPollRecords"),
        ):
            value = status.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                self._child(gauge).set(value)

    def _child(self, family: Any, *extra: str) -> Any:
        found = self._children.get((family, extra))
        if found is None:
            found = self._children[(family, extra)] = family.labels(*self.labels, *extra)
        return found

    def rested(self) -> None:
        """A pass at rest: counted, not timed (a comparison is not a pass's duration)."""
        self._child(PASSES, "at_rest").inc()

    def scaled(self, before: int, after: int) -> None:
        SCALES.labels(*self.labels, "up" if after > before else "down").inc()
        DESIRED.labels(*self.labels).set(after)

    def lag_unreadable(self) -> None:
        """A pass could not read the lag: counted, and the last lag read is withdrawn (a
        stale figure would look current)."""
        LAG_FAILURES.labels(*self.labels).inc()
        if _OWNERS.get(self.labels) is not self:
            return  # a newer group of the same name owns these series now (as in ``close``)
        for gauge in (LAG, TIME_LAG):
            self._children.pop((gauge, ()), None)
            with contextlib.suppress(KeyError):
                gauge.remove(*self.labels)

    def tuned(self) -> None:
        TUNINGS.labels(*self.labels).inc()

    def close(self) -> None:
        if _OWNERS.get(self.labels) is not self:
            return  # a newer group of the same name owns these series now
        del _OWNERS[self.labels]
        self._children.clear()
        for family in FAMILIES:
            for extra in _COUNTED.get(family, ((),)):
                with contextlib.suppress(KeyError):
                    family.remove(*self.labels, *extra)
        for result in RECONCILE_RESULTS:
            with contextlib.suppress(KeyError):
                RECONCILES.remove(*self.labels[:2], result)


def reconciled(namespace: str, name: str, result: str) -> None:
    """One reconcile of a group's spec came to ``result`` (one of ``RECONCILE_RESULTS``)."""
    RECONCILES.labels(namespace, name, result).inc()


def of(memo: Any) -> Series | None:
    """The group's series if its pass made them (a pass run without ``series``: none)."""
    found = memo.get("metrics")
    return found if isinstance(found, Series) else None


def series(memo: Any, namespace: str, name: str, group: str) -> Series:
    """The group's series, kept in its memo (made at its first pass, or when its group id
    changes: the old ones are removed)."""
    found = memo.get("metrics")
    if found is None or found.labels != (namespace, name, group):
        if found is not None:
            found.close()
        found = memo["metrics"] = Series(namespace, name, group)
    return found  # type: ignore[no-any-return]


def parse_address(text: str) -> tuple[str, int] | None:
    """``host:port`` (``[::]:8081`` for IPv6) or ``off``; ValueError names what is wrong."""
    if text == "off":
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r} is not host:port (or off)")
    return host.strip("[]") or "0.0.0.0", int(port)


def serve(address: tuple[str, int]) -> None:
    """``/metrics`` in a daemon thread; OSError if the address cannot be bound."""
    host, port = address
    start_http_server(port, host, registry=REGISTRY)
