"""The autopilot's settings in a ``ConsumerGroup``: ``autoscaling`` (with its ``fallback``) and
``tuning``, validated as the rest of the spec (``spec.py`` holds them in ``FleetSettings``).

Owns the fields, their defaults and bounds and the rules between them; the CRD's schema is
made from these models (``crd.py``). Does not own what the operator does with them
(``scaling.py``, ``tuning.py``) or any I/O.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

_Strict = ConfigDict(frozen=True, extra="forbid")


class Fallback(BaseModel):
    """What to run while the lag cannot be read (KEDA's ``fallback``)."""

    model_config = _Strict

    failure_threshold: int = Field(
        3, ge=0, le=10_000, description="fall back after more failed reads in a row than this"
    )
    replicas: int = Field(ge=0, le=1000, description="the replicas to run meanwhile")
    behavior: Literal["static", "current_replicas_if_higher", "current_replicas_if_lower"] = Field(
        "static",
        description="static: replicas; current_replicas_if_higher: the current count if "
        "it is higher, else replicas; current_replicas_if_lower: the current count if it "
        "is lower, else replicas (KEDA's fallback.behavior)",
    )


class Autoscaling(BaseModel):
    """Replicas from the group's lag, read from Kafka (right even at zero replicas)."""

    model_config = _Strict

    min_replicas: int = Field(1, ge=0, le=1000, description="0 allows scaling to zero")
    max_replicas: int = Field(
        10,
        ge=1,
        le=1000,
        description="never above the partition count, but with group_type share (a share "
        "group's members share every partition)",
    )
    lag_per_replica: int = Field(1000, ge=1, description="records of lag one replica takes on")
    target_time_lag_s: float | None = Field(
        None,
        gt=0,
        le=86_400,
        description="also scale so the estimated time lag stays under this: replicas for the "
        "input rate and the backlog, over the rate one ready replica was measured to commit",
    )
    activation_lag: int = Field(
        0,
        ge=0,
        description="the group is Active above this lag; with min_replicas 0: scale from zero "
        "when lag passes this",
    )
    scale_up_stabilization_s: int = Field(
        0, ge=0, le=3600, description="scale up to the lowest wish of this window (0: at once)"
    )
    scale_down_stabilization_s: int = Field(
        300,
        ge=0,
        le=86_400,
        description="scale down only to the highest wish of this window, and not before the "
        "operator has watched the group this long (after a restart too)",
    )
    scale_up_max_pods: int = Field(
        4, ge=1, le=1000, description="add at most this many pods per scale_up_period_s ..."
    )
    scale_up_max_percent: int = Field(
        100, ge=1, le=10_000, description="... or this percentage, whichever allows more (HPA)"
    )
    scale_up_period_s: int = Field(
        15, ge=1, le=3600, description="the period of scale_up_max_pods and _percent"
    )
    scale_up_in_one_step: bool = Field(
        True,
        description="a group whose replicas' commit rate is measured scales up to its wish in "
        "one step (the rates size it); the scale_up_max_pods and _percent limits then pace "
        "only a group not measured yet. false: they pace every scale up, as the HPA's",
    )
    scale_up_ready_timeout_s: int = Field(
        120,
        ge=0,
        le=3600,
        description="the next scale-up waits until the last step's pods are Ready, at most "
        "this long after it (a pod that never gets ready does not block scaling)",
    )
    scale_to_zero_on_invalid_offset: bool = Field(
        False,
        description="a partition with no committed offset counts as no lag (KEDA's "
        "scaleToZeroOnInvalidOffset); by default it counts 1 with auto_offset_reset latest, "
        "its backlog with earliest, so a new group is not scaled to zero before it commits",
    )
    exclude_persistent_lag: bool = Field(
        False,
        description="the lag of a partition the sidecars judge STOP (lag, and its commit has "
        "not moved for minutes: wedged, not slow) does not drive scaling: more replicas would "
        "not help it. STALL (no commit in a short window) still counts: slow handlers are "
        "a reason to scale",
    )
    even_partitions: bool = Field(
        False,
        description="replicas snapped up to a divisor of the partition count, so each "
        "replica gets as many partitions (KEDA's ensureEvenDistributionOfPartitions); not with "
        "group_type share, whose replicas share every partition",
    )
    fallback: Fallback | None = Field(
        None, description="replicas to run while the lag cannot be read; else they are held"
    )
    external: bool = Field(
        False, description="an HPA or KEDA owns replicas; the operator only reports lag"
    )

    @model_validator(mode="after")
    def _ordered(self) -> Autoscaling:
        if self.min_replicas > self.max_replicas:
            raise ValueError("min_replicas must not exceed max_replicas")
        if self.fallback and not self.min_replicas <= self.fallback.replicas <= self.max_replicas:
            raise ValueError("fallback.replicas must lie within min_replicas and max_replicas")
        return self


class Tuning(BaseModel):
    """``max_poll_records`` from the sidecars' measured handler latency and concurrency: what
    one poll hands to the work queues (``tuning.py`` says why that, not the drain)."""

    model_config = _Strict

    enabled: bool = True
    poll_intervals: float = Field(
        2.0,
        ge=1,
        le=100,
        description="one poll hands over what the handlers finish in this many "
        "poll_interval_ms, so they never wait for the Poller",
    )
    min_max_poll_records: int = Field(10, ge=1, le=100_000)
    max_max_poll_records: int = Field(5000, ge=1, le=100_000)
    max_step: float = Field(2.0, gt=1, le=10, description="the most one change multiplies by")

    @model_validator(mode="after")
    def _ordered(self) -> Tuning:
        if self.min_max_poll_records > self.max_max_poll_records:
            raise ValueError("min_max_poll_records must not exceed max_max_poll_records")
        return self
