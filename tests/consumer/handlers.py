"""Handlers that the worker-process tests run with ``kafleet worker --handler``.

``append_number`` writes each record's partition, offset and number to the file named by
``KAFLEET_TEST_OUT``, one per line, flushed at once, after sleeping ``KAFLEET_TEST_DELAY``
seconds, so a test can see what a worker finished even after killing it. While the file named
by ``KAFLEET_TEST_HOLD`` exists, every record waits for it to go: a handler hung on demand.
"""

from __future__ import annotations

import os
import threading
import time

from kafleet import Record

_lock = threading.Lock()
_out = open(os.environ.get("KAFLEET_TEST_OUT", os.devnull), "a", buffering=1)  # noqa: SIM115
_delay = float(os.environ.get("KAFLEET_TEST_DELAY", "0"))
_hold = os.environ.get("KAFLEET_TEST_HOLD")


def append_number(record: Record) -> None:
    while _hold and os.path.exists(_hold):
        time.sleep(0.05)
    time.sleep(_delay)
    number = (record.value or b"").split(b":", 1)[0].decode()
    with _lock:
        _out.write(f"{record.partition} {record.offset} {number}\n")
        _out.flush()
