"""Handlers that the worker-process tests run with ``kafleet worker --handler``.

``append_number`` writes each record's number to the file named by ``KAFLEET_TEST_OUT``, one per
line, flushed at once, after sleeping ``KAFLEET_TEST_DELAY`` seconds, so a test can see what a
worker finished even after killing it.
"""

from __future__ import annotations

import os
import threading
import time

from kafleet import Record

_lock = threading.Lock()
_out = open(os.environ.get("KAFLEET_TEST_OUT", os.devnull), "a", buffering=1)  # noqa: SIM115
_delay = float(os.environ.get("KAFLEET_TEST_DELAY", "0"))


def append_number(record: Record) -> None:
    time.sleep(_delay)
    number = (record.value or b"").split(b":", 1)[0].decode()
    with _lock:
        _out.write(f"{record.partition} {record.offset} {number}\n")
        _out.flush()
