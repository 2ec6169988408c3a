"""What the autopilot remembers between passes, sized by time and bounded in memory.

Owns two histories, both pure data (no I/O, no clock: the caller passes the time):

- ``Wishes``: the replicas each pass wished, for the stabilization windows. Only the highest
  and the lowest wish of any window ending now matter, so it keeps the suffix maxima and
  minima (a wish that a later, higher one outranks can never be a window's highest again):
  the answers are exactly the full history's, and since wishes are whole numbers of replicas,
  it never holds more than two entries per distinct value, whatever the window (a day at
  one pass a second is 86,400 passes; this keeps at most ``2 * (max_replicas + 1)``).
- ``Offsets``: the sums of log-end and committed offsets (and the ready replicas) pass by
  pass, over a horizon the policy sets (``offsets_horizon_s``: the time-lag target with room
  to spare, so an estimate over the target can be seen), thinned when it grows past
  ``MAX_SAMPLES`` by dropping every other sample of its older half: recent samples stay
  dense for the rates, old ones sparse for the time lag. The sums mean something only over
  one set of partitions: when the set changes (a topic created, deleted or matched, a
  partition added, a first commit), the history starts again rather than read the jump as
  records produced or committed. A replica's commit rate is the records committed over the
  replica-seconds that were ready to commit them (each interval at the larger of its two
  ready counts: a pod that turned ready mid-interval is counted whole, so the rate is never
  overstated, and an understated one asks for a few pods more, which the step limits), and
  the capacity is a high percentile of those rates, not the best: a scale-up neither
  inflates it nor lets one lucky interval rule for ten minutes.

Does not own what the histories mean (``scaling.py``) or where they live (``autoscaler.py``,
in each group's memo).
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass

MAX_SAMPLES = 512
DEFAULT_OFFSETS_HORIZON_S = 600.0  # the time lag reported without a target: up to 10 min
RATE_WINDOW_S = 30.0  # the input and commit rates: over the last this many seconds
CAPACITY_WINDOW_S = 600.0  # a replica's commit rate: a high percentile of this many seconds
CAPACITY_PERCENTILE = 0.9


def offsets_horizon_s(target_time_lag_s: float | None) -> float:
    """How long the offsets history must reach back: twice the target (a lag over the target
    is seen as such), and never less than the default nor the rates' window."""
    return max(DEFAULT_OFFSETS_HORIZON_S, 2 * (target_time_lag_s or 0.0), 2 * RATE_WINDOW_S)


class Wishes:
    """The wishes of the last ``horizon_s`` seconds, compacted (see the module docstring)."""

    def __init__(self, horizon_s: float) -> None:
        self.horizon_s = horizon_s
        self._high: deque[tuple[float, int]] = deque()  # wishes strictly falling, oldest first
        self._low: deque[tuple[float, int]] = deque()  # wishes strictly rising, oldest first

    def add(self, now: float, wish: int) -> None:
        while self._high and self._high[-1][1] <= wish:
            self._high.pop()
        self._high.append((now, wish))
        while self._low and self._low[-1][1] >= wish:
            self._low.pop()
        self._low.append((now, wish))
        for kept in (self._high, self._low):
            while len(kept) > 1 and now - kept[0][0] > self.horizon_s:
                kept.popleft()

    def again(self, now: float) -> None:
        """The newest wish, wished again at ``now`` (a pass at rest wishes what the last did)."""
        if self._high:
            self.add(now, self._high[-1][1])

    def samples(self) -> list[tuple[float, int]]:
        """(time, wish) pairs, oldest first, the newest wish last: what ``scaling.decide``
        reads."""
        return sorted(set(self._high) | set(self._low))


@dataclass(frozen=True)
class Sample:
    at: float
    end: int  # the sum of the log-end offsets
    committed: int  # the sum of the committed offsets (what the lag leaves of the end)
    ready: int = 0  # the ready replicas then
    per_replica: float | None = None  # records a second one ready replica committed, then
    lag: int | None = None  # the lag the pass read (None: end minus committed)


class Offsets:
    """Offsets pass by pass over ``horizon_s``, at most ``MAX_SAMPLES`` of them."""

    def __init__(self, horizon_s: float) -> None:
        self.horizon_s = horizon_s
        self.samples: list[Sample] = []
        self.partitions: object = None  # what the sums are over (``add``'s ``partitions``)
        self.last_capacity: float | None = None  # kept once the busy samples age out

    def add(
        self,
        now: float,
        end: int,
        committed: int,
        ready: int = 0,
        partitions: object = None,
        lag: int | None = None,
    ) -> None:
        """``committed``: the sum over the partitions that have a commit; ``partitions``: a
        value that changes when the set of partitions, or of committed ones, changes; ``lag``:
        the lag the pass read (a partition without a commit counts as the policy says, not
        its whole log)."""
        if partitions != self.partitions:
            self.samples, self.partitions = [], partitions  # other sums: start again
            self.last_capacity = None
        recent = self._recent(now)
        per_replica = None
        if recent and now > recent[0].at:
            done = committed - recent[0].committed
            steps = [*recent, Sample(now, end, committed, ready)]
            pairs = itertools.pairwise(steps)
            replica_s = sum(max(a.ready, b.ready) * (b.at - a.at) for a, b in pairs)
            if replica_s > 0 and done > 0:
                per_replica = done / replica_s
        self.samples.append(Sample(now, end, committed, ready, per_replica, lag))
        while len(self.samples) > 2 and now - self.samples[1].at > self.horizon_s:
            del self.samples[0]  # the oldest kept is the last one beyond the horizon
        if len(self.samples) > MAX_SAMPLES:
            half = len(self.samples) // 2
            self.samples = self.samples[:half:2] + self.samples[half:]

    def again(self, now: float) -> None:
        """The newest sample, read again at ``now`` (a pass at rest reads what the last did)."""
        if self.samples:
            s = self.samples[-1]
            self.add(now, s.end, s.committed, s.ready, self.partitions, s.lag)

    def _recent(self, now: float) -> list[Sample]:
        """The samples of the last ``RATE_WINDOW_S``: a suffix (samples are added in time
        order), found from the end, not by a look at every sample (a pass at rest reads a
        few of the 120 that 10 minutes hold)."""
        start = len(self.samples)
        while start and now - self.samples[start - 1].at <= RATE_WINDOW_S:
            start -= 1
        return self.samples[start:]

    def ends(self) -> list[tuple[float, int]]:
        return [(s.at, s.end) for s in self.samples]

    def rates(self, now: float) -> tuple[float | None, float | None]:
        """The input rate over the last ``RATE_WINDOW_S`` and the commit rate of one ready
        replica over the last ``CAPACITY_WINDOW_S`` (records a second): a high percentile,
        since a rebalance stalls commits for a while and would make a replica look slower
        than it is, but not the best, which one lucky interval sets. None where nothing was
        measured."""
        recent = self._recent(now)
        input_rate = None
        if len(recent) >= 2 and recent[-1].at > recent[0].at:
            span = recent[-1].at - recent[0].at
            input_rate = max(0.0, (recent[-1].end - recent[0].end) / span)
        measured = sorted(
            s.per_replica
            for s in self.samples
            if s.per_replica is not None and now - s.at <= CAPACITY_WINDOW_S
        )
        return input_rate, _percentile(measured)

    def capacity(self, now: float, busy_lag_per_replica: int) -> float | None:
        """What one ready replica can commit, records a second: the same percentile as
        ``rates``, but only of samples taken while the fleet had work waiting (a lag of at
        least ``busy_lag_per_replica`` per ready replica). An idle fleet's commit rate is its
        input shared out, not what it could do. Once the busy samples are older than
        ``CAPACITY_WINDOW_S`` the last figure stands (a fleet that keeps up is never busy, and
        must not lose what it knows); None until the fleet has been busy over these
        partitions."""
        busy = sorted(
            s.per_replica
            for s in self.samples
            if s.per_replica is not None
            and now - s.at <= CAPACITY_WINDOW_S
            and (s.end - s.committed if s.lag is None else s.lag)
            >= busy_lag_per_replica * max(s.ready, 1)
        )
        self.last_capacity = _percentile(busy) or self.last_capacity
        return self.last_capacity


def _percentile(ordered: list[float]) -> float | None:
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, int(CAPACITY_PERCENTILE * len(ordered)))]
