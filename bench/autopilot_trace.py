"""B8's lag trace and its figures: pure functions, no I/O.

Owns: the input rate at each moment (``Trace``: steady, a burst of ``burst_factor`` times that, then
idle), and what one run's samples say (``summarise``): seconds from the burst's start to the first
scale-up decided within the burst; seconds from the burst's end until the lag is back under the
threshold (0: it never rose above it, or was back by then; counted from the end so the burst's fixed
two minutes do not water down a ratio); replica-seconds (the Deployment's pods, ready or not: what
the cluster pays for) over the whole observed run; the maximum lag; scale events (each change of the
wished replicas); reversals (a scale in the other direction than the one before) and flaps (a
scale-up after a scale-down: the fleet went back on a decision; a burst's one rise and one fall are
neither).

Does not own running anything (``b8_autopilot.py``).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Trace:
    steady_per_s: float
    steady_s: float
    burst_s: float
    idle_s: float
    burst_factor: float = 10.0

    @property
    def burst_start(self) -> float:
        return self.steady_s

    @property
    def burst_end(self) -> float:
        return self.steady_s + self.burst_s

    @property
    def total_s(self) -> float:
        return self.burst_end + self.idle_s

    def rate(self, t: float) -> float:
        """Records a second at ``t`` seconds into the trace."""
        if t < self.burst_start:
            return self.steady_per_s
        if t < self.burst_end:
            return self.steady_per_s * self.burst_factor
        return 0.0

    def due(self, t: float) -> int:
        """Records that should have been written by ``t``."""
        steady = min(t, self.burst_start) * self.steady_per_s
        burst = max(0.0, min(t, self.burst_end) - self.burst_start) * self.rate(self.burst_start)
        return int(steady + burst)


@dataclass(frozen=True)
class Sample:
    t: float  # seconds into the trace
    wished: int  # spec.replicas
    pods: int  # the Deployment's status.replicas: pods that exist, ready or not
    ready: int
    lag: int


@dataclass(frozen=True)
class Figures:
    first_scale_up_s: float | None
    drained_s: float | None
    replica_seconds: float
    max_lag: int
    max_replicas: int
    scale_events: int
    reversals: int
    flaps: int


def _changes(samples: Sequence[Sample]) -> list[int]:
    """The signed steps of the wished replicas, in order."""
    steps = []
    for a, b in itertools.pairwise(samples):
        if b.wished != a.wished:
            steps.append(b.wished - a.wished)
    return steps


def summarise(samples: Sequence[Sample], trace: Trace, threshold: int) -> Figures:
    ordered = sorted(samples, key=lambda s: s.t)
    up = next(
        (
            b.t - trace.burst_start
            for a, b in itertools.pairwise(ordered)
            if a.t >= trace.burst_start and b.wished > a.wished
        ),
        None,
    )
    drained = next(
        (s.t - trace.burst_end for s in ordered if s.t >= trace.burst_end and s.lag < threshold),
        None,
    )
    seconds = sum(a.pods * (b.t - a.t) for a, b in itertools.pairwise(ordered))
    steps = _changes(ordered)
    signs = [1 if s > 0 else -1 for s in steps]
    reversals = sum(1 for a, b in itertools.pairwise(signs) if a != b)
    flaps = sum(1 for a, b in itertools.pairwise(signs) if a < 0 < b)
    return Figures(
        first_scale_up_s=up,
        drained_s=drained,
        replica_seconds=seconds,
        max_lag=max((s.lag for s in ordered), default=0),
        max_replicas=max((s.wished for s in ordered), default=0),
        scale_events=len(steps),
        reversals=reversals,
        flaps=flaps,
    )
