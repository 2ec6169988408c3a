"""Leader election by a ``coordination.k8s.io`` Lease, as client-go's ``leaderelection`` does it:
what one candidate does next, given the Lease as it last read it.

Owns the rules, and nothing else:

- A Lease no one holds (absent, or released: an empty ``holderIdentity``) is taken at once.
- A Lease another candidate holds is theirs until ``leaseDurationSeconds`` have passed *on this
  candidate's clock* since it last saw the Lease change (client-go's ``observedTime``): the
  holder's ``renewTime`` is never compared with this clock, so clocks that disagree between
  nodes cannot make two leaders. Once that much time passed with no change, it is taken over
  (``leaseTransitions`` + 1).
- The holder renews every ``retry_s``; if it could not renew for ``renew_deadline_s`` (shorter
  than the duration), it stops leading *before* anyone else may take over, so the old leader
  has stood down by the time a new one starts: never two writers at once.
- Leaving cleanly, the holder releases the Lease (empty holder, duration 1 s, client-go's
  ``ReleaseOnCancel``): a standby takes it at its next try, in about ``retry_s``.

Times are seconds on one candidate's monotonic clock. Pure: no I/O; reading and writing the
Lease (with its ``resourceVersion``, so that of two candidates writing at once one fails and
reads again) is the edge's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

Action = Literal["acquire", "renew", "stand-by", "stand-down"]

# client-go's defaults (leaderelection.LeaderElectionConfig, as KEDA and controller-runtime
# use them) are 15 s, 10 s and 2 s. A holder that died is replaced within DURATION + 2 RETRY
# seconds of its last renewal (a standby sees the renewal at its next step, and takes the Lease
# at the step after the duration): 10 s here, so a SIGKILLed leader is replaced within 15 s of
# its death, not 19. The renew deadline keeps client-go's margin of 3 s below the duration.
DURATION_S = 10
RENEW_DEADLINE_S = 7.0
RETRY_S = 2.0


@dataclass(frozen=True)
class Record:
    """A Lease's spec, as the candidates read and write it."""

    holder: str = ""  # holderIdentity; empty: released
    duration_s: int = DURATION_S  # leaseDurationSeconds
    transitions: int = 0  # leaseTransitions
    renew_time: str = ""  # renewTime as the server holds it: compared for change, never read


@dataclass(frozen=True)
class Observed:
    """The Lease as this candidate last read it, and when it last saw it change."""

    record: Record | None  # None: no Lease yet
    changed_at: float  # this candidate's clock when the record was first seen as it is


@dataclass(frozen=True)
class Timing:
    duration_s: int = DURATION_S
    renew_deadline_s: float = RENEW_DEADLINE_S
    retry_s: float = RETRY_S

    def __post_init__(self) -> None:
        if not 0 < self.retry_s < self.renew_deadline_s < self.duration_s:
            raise ValueError(
                f"need 0 < retry_s < renew_deadline_s < duration_s, got {self.retry_s}, "
                f"{self.renew_deadline_s}, {self.duration_s}"
            )


def seen(previous: Observed | None, record: Record | None, now: float) -> Observed:
    """What a read tells: the time of change moves only when the record changed (a holder's
    renewal changes its ``renew_time``)."""
    if previous is not None and previous.record == record:
        return previous
    return Observed(record, now)


def decide(
    me: str, observed: Observed, now: float, timing: Timing, renewed_at: float | None
) -> Action:
    """What ``me`` does at ``now``. ``renewed_at``: when ``me`` last renewed or acquired the
    Lease successfully (None: it is not leading)."""
    record = observed.record
    if record is None or not record.holder:
        return "acquire"
    if record.holder == me:
        if renewed_at is not None and now - renewed_at >= timing.renew_deadline_s:
            return "stand-down"  # before any other candidate may see the Lease expire
        return "renew"
    if now - observed.changed_at >= record.duration_s:
        return "acquire"
    return "stand-by"


def acquired(me: str, record: Record | None, timing: Timing, renew_time: str) -> Record:
    """The record ``me`` writes to take or renew the Lease at ``renew_time`` (the server's
    format, RFC 3339 with microseconds); a new holder counts a transition."""
    if record is None:
        return Record(me, timing.duration_s, 0, renew_time)
    changes = 0 if record.holder == me else 1
    return Record(me, timing.duration_s, record.transitions + changes, renew_time)


def released(record: Record) -> Record:
    """The record the holder writes as it leaves: no holder, a duration of one second."""
    return replace(record, holder="", duration_s=1)
