"""When to try a failing record again: exponential backoff with jitter, up to a limit.

Owns: the retry schedule, as pure functions of the policy, the attempt number and a random
source (so tests can pin it). Does not own sleeping (``failure_policy.py``) or running the
handler (``function_runs.py``, ``coroutines.py``).
"""

from __future__ import annotations

import random
from collections.abc import Callable

from kafleet.config.retry_policy import RetryPolicy


def backoff_s(
    policy: RetryPolicy, attempt: int, rand: Callable[[], float] = random.random
) -> float:
    """Seconds to wait after failed attempt ``attempt`` (1-based) before the next one.

    The base wait is ``initial * multiplier ** (attempt - 1)``, capped at ``max``; jitter moves
    it by up to ``± jitter`` of itself, and the result never exceeds the cap.
    """
    if attempt < 1:
        raise ValueError(f"attempt numbers start at 1, not {attempt}")
    base_ms = min(
        policy.max_backoff_ms,
        policy.initial_backoff_ms * policy.multiplier ** min(attempt - 1, 64),
    )
    spread = base_ms * policy.jitter * (2 * rand() - 1)
    return max(0.0, min(policy.max_backoff_ms, base_ms + spread)) / 1000


def should_retry(policy: RetryPolicy, attempt: int) -> bool:
    """Whether a record whose attempt ``attempt`` failed gets another attempt."""
    return attempt < policy.max_attempts


def schedule_s(policy: RetryPolicy, rand: Callable[[], float] = random.random) -> list[float]:
    """Every wait a record that always fails goes through, in order."""
    return [backoff_s(policy, a, rand) for a in range(1, policy.max_attempts)]
