"""The ``queue`` section of the configuration: how much each assigned partition may hold.

Owns: ``QueueBounds``, the bounds of a partition's work queue (records not yet started) with
their defaults, units and limits: the high mark in records and in bytes, the low mark at which
a paused partition resumes, and the optional bound in seconds of work. ``ConsumerConfig.queue``
holds one; the CRD's ``spec.queue`` is the same model.

Does not own the rules that span sections (``max_poll_records`` and ``spark.batch.max_records``
within ``queue.max_records``: ``config/rules.py``), the ordering of a queue's records
(``ordering``, ``config/model.py``), or applying the bounds: pausing and resuming
(``engine/partition_state.py``, ``engine/work_queue.py``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class QueueBounds(BaseModel):
    """How much each assigned partition may hold in its work queue (records not yet started)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_records: int = Field(
        5000,
        ge=1,
        le=1_000_000,
        description="records; the partition is "
        "paused when its queue holds this many (the high mark)",
    )
    max_bytes: int = Field(
        8 * 1024 * 1024,
        ge=1024,
        description="bytes of the records' values; also pauses the partition when reached",
    )
    resume_at: float = Field(
        0.5,
        gt=0,
        lt=1,
        description="a paused partition resumes when "
        "its queue falls to this share of both bounds (the low mark)",
    )
    max_seconds: float | None = Field(
        None,
        gt=0,
        le=3600,
        description="seconds of work; the record bound then follows the measured handling rate "
        "(never above max_records), so a partition has this much work buffered, not more",
    )
