"""The ``retry`` section of the configuration: how a failing record is tried again.

Owns: ``RetryPolicy``, the attempts and the backoff between them (initial and longest wait,
growth, jitter) with their defaults and limits, and the one rule among them (the longest wait
is not below the first). ``ConsumerConfig.retry`` holds one; the CRD's ``spec.retry`` is the
same model.

Does not own what happens after the last attempt (``on_failure``, ``dead_letter_topic``:
``config/model.py``), the schedule computed from the policy (``engine/retry.py``), or waiting
and trying again (``engine/failure_policy.py``, ``share/outcomes.py``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class RetryPolicy(BaseModel):
    """How a failing record is retried before the failure policy applies."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_attempts: int = Field(3, ge=1, le=1000, description="attempts in all, the first included")
    initial_backoff_ms: int = Field(100, ge=0, description="wait before the second attempt")
    max_backoff_ms: int = Field(30_000, ge=0, description="the longest wait between attempts")
    multiplier: float = Field(2.0, ge=1.0, le=10.0, description="growth of the wait per attempt")
    jitter: float = Field(0.2, ge=0.0, le=1.0, description="random share added or taken off")

    @model_validator(mode="after")
    def _bounds_ordered(self) -> RetryPolicy:
        if self.max_backoff_ms < self.initial_backoff_ms:
            raise ValueError("max_backoff_ms must not be below initial_backoff_ms")
        return self
