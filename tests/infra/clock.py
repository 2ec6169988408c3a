"""A clock for tests of pure policies and their callers: monotonic seconds a test sets by hand
(``clock.now += 5``), passed wherever the code takes a ``Callable[[], float]`` clock."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Clock:
    """Calling it gives ``now``."""

    now: float = 0.0

    def __call__(self) -> float:
        return self.now
