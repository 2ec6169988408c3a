"""What a failed attempt becomes in a share group, the pure policy: retried in process while
attempts remain and the record's lock has room for the backoff, the next try and a margin;
released to the group when the lock is too short and deliveries remain; dead-lettered when the
attempts are spent or on the record's last delivery (a release would let the broker archive
it); released when the worker is stopping (dead-lettered on the last delivery); retried when
the lock is not known."""

from __future__ import annotations

import pytest

from kafleet.config.retry_policy import RetryPolicy
from kafleet.share.outcomes import (
    LOCK_MARGIN_MIN_S,
    After,
    Failure,
    after_failure,
    last_delivery,
    margin_s,
)

POLICY = RetryPolicy(max_attempts=3)
LIMIT = 5  # the group's delivery limit
LOCK_S = 30.0  # its record lock: a margin of 3 s


def _failure(
    attempt: int = 1,
    delivery: int = 1,
    lock_left: float | None = 20.0,
    backoff: float = 1.0,
    took: float = 1.0,
) -> Failure:
    return Failure(attempt, delivery, lock_left, backoff, took)


CASES = {
    "first-failure-with-room-in-the-lock": (_failure(), False, After.RETRY),
    "second-failure-with-room": (_failure(attempt=2, lock_left=10.0), False, After.RETRY),
    "room-on-the-last-delivery": (_failure(delivery=LIMIT), False, After.RETRY),
    # backoff 1 + the last try 1 + margin 3 = 5 s needed
    "just-enough-room": (_failure(lock_left=5.01), False, After.RETRY),
    "exactly-the-room-needed-is-not-enough": (_failure(lock_left=5.0), False, After.RELEASE),
    "a-backoff-beyond-the-lock": (_failure(backoff=40.0), False, After.RELEASE),
    "a-slow-attempt-leaves-no-room": (_failure(took=17.0), False, After.RELEASE),
    "the-lock-already-ran-out": (_failure(lock_left=-1.0), False, After.RELEASE),
    "no-room-with-one-delivery-left": (
        _failure(delivery=LIMIT - 1, lock_left=2.0),
        False,
        After.RELEASE,
    ),
    "no-room-on-the-last-delivery": (
        _failure(delivery=LIMIT, lock_left=2.0),
        False,
        After.DEAD_LETTER,
    ),
    "no-room-beyond-the-last-delivery": (
        _failure(delivery=LIMIT + 2, lock_left=2.0),
        False,
        After.DEAD_LETTER,
    ),
    "attempts-spent-with-room-left": (_failure(attempt=3), False, After.DEAD_LETTER),
    "attempts-spent-with-deliveries-left-and-no-room": (
        _failure(attempt=3, lock_left=1.0),
        False,
        After.DEAD_LETTER,
    ),
    "attempts-spent-with-the-lock-unknown": (
        _failure(attempt=3, lock_left=None),
        False,
        After.DEAD_LETTER,
    ),
    "lock-unknown": (_failure(lock_left=None, backoff=1000.0), False, After.RETRY),
    "lock-unknown-on-the-last-delivery": (
        _failure(lock_left=None, delivery=LIMIT),
        False,
        After.RETRY,
    ),
    "stopping": (_failure(), True, After.RELEASE),
    "stopping-with-attempts-spent": (_failure(attempt=3), True, After.RELEASE),
    "stopping-with-the-lock-unknown": (_failure(lock_left=None), True, After.RELEASE),
    "stopping-on-the-last-delivery": (_failure(delivery=LIMIT), True, After.DEAD_LETTER),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_failed_attempt_is_retried_released_or_dead_lettered(case: str) -> None:
    failure, stopping, expected = CASES[case]

    assert after_failure(failure, POLICY, LIMIT, LOCK_S, stopping) is expected


def test_a_policy_of_one_attempt_dead_letters_the_first_failure() -> None:
    once = RetryPolicy(max_attempts=1)

    assert after_failure(_failure(), once, LIMIT, LOCK_S, False) is After.DEAD_LETTER
    assert after_failure(_failure(lock_left=None), once, LIMIT, LOCK_S, False) is (
        After.DEAD_LETTER
    )


def test_the_margin_is_a_tenth_of_the_lock_and_at_least_half_a_second() -> None:
    assert margin_s(30.0) == pytest.approx(3.0)
    assert margin_s(2.0) == LOCK_MARGIN_MIN_S == 0.5
    assert margin_s(0.0) == LOCK_MARGIN_MIN_S


def test_a_short_lock_keeps_half_a_second_free() -> None:
    # A 2 s lock: a 1 s backoff after a 0.4 s attempt needs 1.9 s.
    roomy = _failure(lock_left=1.95, backoff=1.0, took=0.4)
    tight = _failure(lock_left=1.85, backoff=1.0, took=0.4)

    assert after_failure(roomy, POLICY, LIMIT, 2.0, False) is After.RETRY
    assert after_failure(tight, POLICY, LIMIT, 2.0, False) is After.RELEASE


@pytest.mark.parametrize(
    ("delivery", "limit", "last"),
    [(1, 5, False), (4, 5, False), (5, 5, True), (6, 5, True), (1, 2, False), (2, 2, True)],
)
def test_the_last_delivery_is_the_one_that_reaches_the_limit(
    delivery: int, limit: int, last: bool
) -> None:
    assert last_delivery(delivery, limit) is last
