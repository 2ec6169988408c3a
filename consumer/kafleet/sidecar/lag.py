"""Judging a partition's consumer lag over a sliding window, the way Burrow does.

Owns: the pure evaluation (``judge``) of a window of samples (time, committed offset, log-end
offset) into a status, and the window itself (``LagWindow``). No I/O: the sidecar feeds it the
samples it reads. The statuses, most severe first:

- ``REWIND``: the committed offset went back (a reset, or a bug).
- ``STOP``: there is lag and the committed offset has not moved for longer than ``stop_after_s``
  (nothing is being committed at all: the consumer is gone or wedged).
- ``STALL``: there is lag and the committed offset did not move in the whole window.
- ``WARN``: the committed offset moves, but the lag grew across the window (the consumer is
  falling behind).
- ``OK``: no lag at the last sample, or the lag is not growing.

A window needs at least ``min_samples`` samples before anything but ``OK`` is said: one sample
shows no trend. Burrow's own rules are the model (its ERR/WARN/STALL/STOP/REWIND evaluator);
here the samples are periodic readings instead of commit events.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Literal

Status = Literal["OK", "WARN", "STALL", "STOP", "REWIND"]
STATUS_CODES: dict[Status, int] = {"OK": 0, "WARN": 1, "STALL": 2, "STOP": 3, "REWIND": 4}


@dataclass(frozen=True)
class Sample:
    at: float  # seconds (any monotonic clock)
    committed: int  # the group's committed offset (next record to process)
    end: int  # the partition's log-end offset

    @property
    def lag(self) -> int:
        return max(0, self.end - self.committed)


def judge(
    window: Sequence[Sample],
    *,
    stop_after_s: float,
    moved_at: float | None = None,
    min_samples: int = 3,
) -> Status:
    """The status of one partition from its samples, oldest first. ``moved_at`` is when its
    committed offset last changed, if known from before the window."""
    if not window:
        return "OK"
    last = window[-1]
    if any(b.committed < a.committed for a, b in pairwise(window)):
        return "REWIND"
    if last.lag == 0:
        return "OK"
    unchanged_since = last.at
    for sample in reversed(window):
        if sample.committed != last.committed:
            break
        unchanged_since = sample.at
    if moved_at is not None and unchanged_since == window[0].at:
        unchanged_since = min(unchanged_since, moved_at)
    if last.at - unchanged_since > stop_after_s:
        return "STOP"
    if len(window) < min_samples:
        return "OK"
    first = window[0]
    if first.committed == last.committed:  # lagging now, and not one commit in the window
        return "STALL"
    lags = [s.lag for s in window]
    if all(b >= a for a, b in pairwise(lags)) and lags[-1] > lags[0]:
        return "WARN"
    return "OK"


@dataclass
class LagWindow:
    """The last ``size`` samples of one partition, and when its committed offset last moved."""

    size: int = 10
    samples: deque[Sample] = field(default_factory=deque)
    moved_at: float | None = None

    def add(self, sample: Sample) -> None:
        if self.samples and sample.at <= self.samples[-1].at:
            return  # the same reading twice
        if not self.samples or sample.committed != self.samples[-1].committed:
            self.moved_at = sample.at
        self.samples.append(sample)
        while len(self.samples) > self.size:
            self.samples.popleft()

    def judge(self, stop_after_s: float) -> Status:
        return judge(list(self.samples), stop_after_s=stop_after_s, moved_at=self.moved_at)
