"""Retries back off exponentially, with bounded jitter, up to a limit."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafleet.config.retry_policy import RetryPolicy
from kafleet.engine.retry import backoff_s, schedule_s, should_retry


def test_waits_grow_by_the_multiplier_and_stop_at_the_cap_without_jitter() -> None:
    policy = RetryPolicy(
        max_attempts=6, initial_backoff_ms=100, max_backoff_ms=1000, multiplier=3.0, jitter=0.0
    )

    assert schedule_s(policy) == [0.1, 0.3, 0.9, 1.0, 1.0]


def test_a_record_gets_exactly_max_attempts() -> None:
    policy = RetryPolicy(max_attempts=3)

    assert [should_retry(policy, a) for a in (1, 2, 3)] == [True, True, False]


@given(
    attempt=st.integers(1, 200),
    jitter=st.floats(0, 1),
    rand=st.floats(0, 1, exclude_max=True),
)
def test_jitter_stays_within_its_share_and_never_passes_the_cap(
    attempt: int, jitter: float, rand: float
) -> None:
    policy = RetryPolicy(
        max_attempts=1000, initial_backoff_ms=50, max_backoff_ms=5000, multiplier=2.0, jitter=jitter
    )
    base = min(5000, 50 * 2.0 ** (attempt - 1)) / 1000

    wait = backoff_s(policy, attempt, rand=lambda: rand)

    assert 0 <= wait <= 5.0
    assert base * (1 - jitter) - 1e-9 <= wait <= base * (1 + jitter) + 1e-9


def test_attempt_numbers_start_at_one() -> None:
    with pytest.raises(ValueError, match="start at 1"):
        backoff_s(RetryPolicy(), 0)
