"""A model of what users run instead of kafleet's autopilot: KEDA's Kafka scaler feeding the
Horizontal Pod Autoscaler. Pure: time, lag and replicas in, the replicas the HPA writes out.

Each rule, and where it comes from:

- **The metric** (KEDA ``pkg/scalers/kafka_scaler.go``, ``getTotalLag`` and
  ``getLagForPartition``, v2.21): a partition's lag is its log-end offset minus the group's
  committed offset; with no commit, ``offsetResetPolicy: latest`` counts 1 (0 with
  ``scaleToZeroOnInvalidOffset``) and ``earliest`` counts the whole partition. Unless
  ``allowIdleConsumers``, the total becomes ``partitions * lagThreshold`` once ``total /
  lagThreshold`` (integer division) exceeds the partitions, so the HPA asks for at most one replica
  more than the partitions. No lag is clamped at 0. It is exposed as an External metric with target
  type ``AverageValue`` of ``lagThreshold`` (``GetMetricSpecForScaling``).
- **When Kafka is asked.** KEDA polls every ``pollingInterval`` (default 30 s). In v2.21 the
  HPA's own reads through the metrics adapter query the scaler when it is active with
  ``minReplicaCount`` >= 1 (``UsesHPAObservations`` in ``pkg/scaling/scale_handler.go``; seen
  on this machine, ``../shared/KEDA.md``), so the HPA sees a value at most ``sync_period_s``
  old: ``hpa_reads_kafka=True``, the default here, models that; ``False`` models the value
  cached at each poll.
- **The HPA's algorithm** (kubernetes.io, "Horizontal Pod Autoscaling", "Algorithm details";
  ``pkg/controller/podautoscaler/replica_calculator.go``, ``GetExternalPerPodMetricReplicas``): for
  an AverageValue target, ``usage = metric / (target * status replicas)`` (the scale subresource's
  ``.status.replicas``: for a ConsumerGroup, its ``status.replicas``); within the tolerance (10%,
  ``--horizontal-pod-autoscaler-tolerance``) the status replicas stand, else ``desired = ceil(metric
  / target)``; the scale-up limit counts from ``spec.replicas``. It runs every
  ``--horizontal-pod-autoscaler-sync-period`` (15 s).
- **Stabilisation and rate** (``pkg/controller/podautoscaler/horizontal.go``,
  ``normalizeDesiredReplicas``: the path of an HPA with no ``behavior``, which is what KEDA
  makes unless ``advanced.horizontalPodAutoscalerConfig.behavior`` is set): every
  recommendation is kept, and the one used is the highest of the last 300 s
  (``--horizontal-pod-autoscaler-downscale-stabilization``, ``stabilizeRecommendation``), so
  scaling down waits the window and up happens at once; up by at most
  ``max(2 * current, 4)`` per sync (``calculateScaleUpLimit``); down with no rate limit; then
  ``minReplicas`` / ``maxReplicas``. KEDA.md measured exactly this on the real thing: 1 -> 4
  at 16 s, 4 -> 8 at 31 s.

Does not own running anything (``b8_autopilot.py`` drives a real Deployment with it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Settings:
    """A ScaledObject with the ``kafka`` trigger, and the HPA it makes (defaults: KEDA's)."""

    lag_threshold: int = 10  # KEDA's default lagThreshold
    min_replicas: int = 1
    max_replicas: int = 100
    polling_interval_s: float = 30.0
    hpa_reads_kafka: bool = True
    allow_idle_consumers: bool = False
    offset_reset_latest: bool = True
    scale_to_zero_on_invalid_offset: bool = False
    sync_period_s: float = 15.0
    tolerance: float = 0.1
    down_window_s: float = 300.0


def partition_lag(end: int, committed: int | None, settings: Settings) -> int:
    """One partition's lag as KEDA counts it (``getLagForPartition``)."""
    if committed is None or committed < 0:
        if settings.offset_reset_latest:
            return 0 if settings.scale_to_zero_on_invalid_offset else 1
        return end
    return end - committed


def metric(ends: Mapping[int, int], committed: Mapping[int, int | None], settings: Settings) -> int:
    """The External metric KEDA reports: the total lag, set to partitions * lagThreshold when
    ``total // lagThreshold`` (Go's integer division) exceeds the partitions; so a lag just
    over ``partitions * lagThreshold`` is not capped, and the HPA may ask for one replica more
    than the partitions (``max_replicas`` is the real bound)."""
    total = sum(partition_lag(end, committed.get(p), settings) for p, end in ends.items())
    if not settings.allow_idle_consumers and total // settings.lag_threshold > len(ends):
        total = len(ends) * settings.lag_threshold
    return total


def desired(metric_value: int, status_replicas: int, settings: Settings) -> int:
    """The HPA's raw recommendation for an AverageValue target, before behaviour."""
    if status_replicas == 0:
        return math.ceil(metric_value / settings.lag_threshold)
    usage = metric_value / (settings.lag_threshold * status_replicas)
    if abs(usage - 1.0) <= settings.tolerance:
        return status_replicas
    return math.ceil(metric_value / settings.lag_threshold)


def scale_up_limit(current: int) -> int:
    """The most replicas one sync may reach (``calculateScaleUpLimit``)."""
    return max(2 * current, 4)


@dataclass
class KedaHpa:
    """The HPA's state for one ScaledObject: its recommendations and when it last synced."""

    settings: Settings
    recommendations: list[tuple[float, int]] = field(default_factory=list)
    last_sync: float | None = None
    last_poll: float | None = None
    polled: int = 0  # the metric as of KEDA's last poll

    def due(self, now: float) -> bool:
        return self.last_sync is None or now - self.last_sync >= self.settings.sync_period_s

    def _observed(self, now: float, fresh: int) -> int:
        s = self.settings
        stale = self.last_poll is None or now - self.last_poll >= s.polling_interval_s
        if s.hpa_reads_kafka or stale:
            self.last_poll, self.polled = now, fresh
        return self.polled

    def sync(
        self, now: float, fresh_metric: int, current: int, status_replicas: int | None = None
    ) -> int | None:
        """One HPA sync at ``now``, given the metric KEDA would read from Kafka now, the scale
        subresource's ``spec.replicas`` (``current``) and ``status.replicas`` (default: the
        same): the replicas the HPA writes, or None when nothing changes."""
        s = self.settings
        self.last_sync = now
        status = current if status_replicas is None else status_replicas
        wish = desired(self._observed(now, fresh_metric), status, s)
        self.recommendations = [
            (t, r) for t, r in self.recommendations if now - t <= s.down_window_s
        ]
        stabilised = max([wish, *(r for _, r in self.recommendations)])
        self.recommendations.append((now, wish))
        ceiling = min(s.max_replicas, scale_up_limit(current))
        replicas = max(s.min_replicas, min(ceiling, stabilised))
        return None if replicas == current else replicas
