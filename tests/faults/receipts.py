"""The handler the fault tests' workers run (``kafleet worker --handler
tests.faults.receipts:handle``): after ``KAFLEET_TEST_DELAY`` seconds, it writes a receipt of
each record (partition, offset, number, wall-clock time) to the file ``KAFLEET_TEST_OUT``,
flushed at once, so a killed worker's receipts survive it (``delivery.read_receipts``)."""

from __future__ import annotations

import os
import threading
import time

from kafleet import Record

_lock = threading.Lock()
_out = open(os.environ.get("KAFLEET_TEST_OUT", os.devnull), "a", buffering=1)  # noqa: SIM115
_delay = float(os.environ.get("KAFLEET_TEST_DELAY", "0"))


def handle(record: Record) -> None:
    time.sleep(_delay)
    number = (record.value or b"").split(b":", 1)[0].decode()
    with _lock:
        _out.write(f"{record.partition} {record.offset} {number} {time.time():.3f}\n")
        _out.flush()
