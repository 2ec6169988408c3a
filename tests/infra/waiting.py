"""Waiting for a condition in tests, with a deadline and a message that says what was awaited."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(condition: Callable[[], T], timeout: float, what: str, every: float = 0.05) -> T:
    """Poll ``condition`` until it is truthy and return what it gave; fail with ``what`` after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)
    return found
