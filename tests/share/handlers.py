"""Handlers that the share-group worker tests run with ``kafleet worker --handler``.

``note_span`` writes ``start NUMBER T`` to the file named by ``KAFLEET_TEST_OUT`` as it takes a
record, sleeps ``KAFLEET_TEST_DELAY`` seconds, then writes ``end NUMBER T0 T1`` (wall-clock
seconds, comparable across processes), each line flushed at once: a test sees what a worker
had in hand, and what it finished, even after killing it.
"""

from __future__ import annotations

import os
import threading
import time

from kafleet import Record

_lock = threading.Lock()
_out = open(os.environ.get("KAFLEET_TEST_OUT", os.devnull), "a", buffering=1)  # noqa: SIM115
_delay = float(os.environ.get("KAFLEET_TEST_DELAY", "0"))


def _note(line: str) -> None:
    with _lock:
        _out.write(line + "\n")
        _out.flush()


def note_span(record: Record) -> None:
    number = int((record.value or b"").split(b":", 1)[0])
    started = time.time()
    _note(f"start {number} {started:.6f}")
    time.sleep(_delay)
    _note(f"end {number} {started:.6f} {time.time():.6f}")
