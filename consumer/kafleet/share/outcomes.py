"""What a handler's outcome becomes in a share group: the pure policy, no I/O.

A share group redelivers what is released, and archives a record, unprocessed and silently,
once it has been delivered ``share.delivery.count.limit`` times. So:

- success: ACCEPT.
- a failure with attempts left (``retry.max_attempts``, counted within this delivery) and
  time left on the record's lock for the backoff and one more try: retried in this process.
- a failure whose lock is nearly out: RELEASE, so the group delivers it again (to any member)
  with a fresh lock; unless this is its last delivery (``delivery_count`` has reached
  ``share.delivery_limit``), when releasing it would let the broker archive it: then it goes
  to the dead-letter topic, like a failure with no attempts left.
- a record the dead-letter topic took: ACCEPT or REJECT (``share.dead_letter_ack``). If the
  dead-letter write fails, RELEASE (nothing lost; on the last delivery the broker archives it,
  which the metrics count).
- shutting down: what has failed is RELEASEd for another member, or dead-lettered on its last
  delivery (a release would let the broker archive it).

Does not own running handlers or waiting (``attempts.py``) or acknowledging (``member.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from kafleet.config.retry_policy import RetryPolicy
from kafleet.engine.retry import should_retry

# The share of the lock kept free for the acknowledgement's round trip, at least this many
# seconds: a try that would end later is not started.
LOCK_MARGIN_SHARE = 0.1
LOCK_MARGIN_MIN_S = 0.5


class After(Enum):
    """What follows a failed attempt."""

    RETRY = "retry"  # in this process, after the backoff
    RELEASE = "release"  # back to the group, delivered again with a fresh lock
    DEAD_LETTER = "dead-letter"  # to the dead-letter topic, then acknowledged by policy


@dataclass(frozen=True)
class Failure:
    """A failed attempt, with what the policy needs to know about its record."""

    attempt: int  # within this delivery, from 1
    delivery_count: int  # from 1: the times the group has delivered the record
    lock_left_s: float | None  # until the record's lock runs out (None: not known)
    backoff_s: float  # the wait before another attempt
    last_attempt_s: float  # how long the failed attempt took


def margin_s(lock_s: float) -> float:
    return max(LOCK_MARGIN_MIN_S, LOCK_MARGIN_SHARE * lock_s)


def after_failure(
    failure: Failure, retry: RetryPolicy, delivery_limit: int, lock_s: float, stopping: bool
) -> After:
    """The next step for a record whose attempt failed."""
    if stopping:  # another member takes it; on its last delivery a release would archive it
        last = last_delivery(failure.delivery_count, delivery_limit)
        return After.DEAD_LETTER if last else After.RELEASE
    if should_retry(retry, failure.attempt):
        needed = failure.backoff_s + failure.last_attempt_s + margin_s(lock_s)
        if failure.lock_left_s is None or needed < failure.lock_left_s:
            return After.RETRY
        if failure.delivery_count < delivery_limit:
            return After.RELEASE  # another delivery brings a fresh lock
    return After.DEAD_LETTER


def last_delivery(delivery_count: int, delivery_limit: int) -> bool:
    """Whether the broker archives this record if it is released or its lock runs out."""
    return delivery_count >= delivery_limit
