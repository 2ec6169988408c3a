"""A group's lag, from its cluster's snapshot (``snapshots.py``): the words of Kafka's errors.

Owns: for a consumer group and its topics, each partition's committed offset, log-end offset
and lag; the lag of a partition with no commit (as KEDA counts it: its backlog from the
earliest offset with ``auto_offset_reset: earliest``, 1 with ``latest``, so a new group is not
scaled to zero before its first commit; 0 with ``zero_without_commit``); naming topics that do
not exist. Read from Kafka, not from the workers, so it is right at zero replicas (as KEDA
does). Pure: the snapshot was read once for every group of the cluster.

A share group (``Want.share``) commits nothing: a partition's lag is the broker's (KIP-1226:
records neither acknowledged nor archived); where the broker cannot tell it but knows the
group's start offset there, every record from that offset to the log end (some may be done: a
bound, never below the lag); where it knows neither (the group has not started there, or has
no state at all: it never had a member), as a consumer group's partition with no commit. A
share group's position (``committed``, for the rates and the time lag) is the log end less its
lag.

A partition whose offsets cannot be read is unknown, never zero: the reading fails
(``LagUnreadableError``, naming the first such partition and why, as ``log_offsets.py`` says
it: its leader did not answer, say), whether its log end could not be read or its log start
where the group needs it (no commit there, ``auto_offset_reset: earliest``); so does a group
whose committed offsets (or share states) could not be read (the ``KafkaException``). Never a
total over the partitions that could be read: that is a smaller lag, and a fleet scales on it
as on the lag.

SSL file locations (``ssl_ca_location``, ...) name files in the workers' pods: the operator
reads them at the same paths in its own pod, and a missing one is an error naming it.

Does not own reading Kafka (``clusters.py``), what the lag means (``scaling.py``) nor where
the passwords come from (``credentials.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException

from kafleet_operator.reading.clusters import TIMEOUT_S
from kafleet_operator.reading.snapshots import TP, Failure, Snapshot, Want

__all__ = [
    "TIMEOUT_S",
    "LagReading",
    "LagUnreadableError",
    "describe",
    "is_authentication_failure",
    "is_share_client_missing",
    "lag_of",
]


# A log start needed and not read, where the read left no cause (``unreadable_starts``).
NO_START = Failure(KafkaError._TIMED_OUT, "no log-start offset")


class LagUnreadableError(Exception):
    """A partition's offsets could not be read: the lag is unknown, not zero."""

    def __init__(self, partition: str, cause: KafkaException) -> None:
        super().__init__(f"the offsets of {partition} cannot be read: {describe(cause)}")
        self.partition = partition


@dataclass(frozen=True)
class LagReading:
    committed: dict[TP, int | None] = field(default_factory=dict)
    ends: dict[TP, int] = field(default_factory=dict)
    lag: dict[TP, int] = field(default_factory=dict)
    missing_topics: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.lag.values())

    @property
    def max_partition(self) -> int:
        return max(self.lag.values(), default=0)

    @property
    def partitions(self) -> int:
        return len(self.ends)

    @property
    def end_total(self) -> int:
        return sum(self.ends.values())

    @property
    def committed_total(self) -> int:
        return sum(self.ends[tp] - lag for tp, lag in self.lag.items())


def is_authentication_failure(exc: KafkaException) -> bool:
    error = exc.args[0] if exc.args else None
    return isinstance(error, KafkaError) and error.code() == KafkaError._AUTHENTICATION


def is_share_client_missing(exc: KafkaException) -> bool:
    """The operator has no Java client to read share groups with (``share_lag.py``)."""
    error = exc.args[0] if exc.args else None
    return isinstance(error, KafkaError) and error.code() == KafkaError._NOT_CONFIGURED


def describe(exc: KafkaException) -> str:
    """The client's words, without the timing that changes at every try (a condition's
    message should not change while nothing does)."""
    error = exc.args[0] if exc.args else None
    text = error.str() if isinstance(error, KafkaError) else str(exc)
    return re.sub(r" \(after \d+ms in state \w+\)", "", text)


def lag_of(
    snapshot: Snapshot,
    want: Want,
    reset_earliest: bool = True,
    zero_without_commit: bool = False,
) -> LagReading:
    """Raises ``LagUnreadableError`` at the first partition whose offsets are unknown, the
    ``KafkaException`` of a group whose committed offsets could not be read."""
    tps, missing = snapshot.partitions(want)
    if not tps:
        return LagReading(missing_topics=missing)
    for tp in tps:
        if tp in snapshot.unreadable:
            cause = snapshot.unreadable[tp].exception()
            raise LagUnreadableError(f"{tp[0]}[{tp[1]}]", cause)
    if want.share:
        committed = _share_positions(snapshot, want, tps)
    else:
        found = snapshot.committed.get(want.group_id, {})
        if isinstance(found, Failure):
            raise found.exception()
        committed = {tp: found.get(tp) for tp in tps}
    ends, lag = {}, {}
    for tp in tps:
        high = snapshot.ends[tp]
        ends[tp] = high
        base = committed[tp]
        if base is not None:
            lag[tp] = max(0, high - base)
        elif zero_without_commit:
            lag[tp] = 0
        elif reset_earliest:
            low = snapshot.starts.get(tp)
            if low is None:
                failure = snapshot.unreadable_starts.get(tp, NO_START)
                raise LagUnreadableError(f"{tp[0]}[{tp[1]}]", failure.exception())
            lag[tp] = max(0, high - low)
        else:
            lag[tp] = 1
    return LagReading(committed, ends, lag, missing)


def _share_positions(snapshot: Snapshot, want: Want, tps: list[TP]) -> dict[TP, int | None]:
    """A share group's position in each partition: the log end less the broker's lag (less
    every record from the start offset, where the broker knows that and not the lag); None
    where it knows neither (``lag_of`` then counts the partition as one with no commit)."""
    found = snapshot.share.get(want.group_id, {})
    if isinstance(found, Failure):
        raise found.exception()
    positions: dict[TP, int | None] = {}
    for tp in tps:
        state, high = found.get(tp), snapshot.ends[tp]
        if state is not None and state.lag is not None:
            positions[tp] = high - min(max(0, state.lag), high)
        elif state is not None and state.start is not None:
            positions[tp] = min(state.start, high)
        else:
            positions[tp] = None
    return positions
