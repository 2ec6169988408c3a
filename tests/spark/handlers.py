"""Handlers that the Spark sink's worker-process tests run with ``kafleet worker --handler``.

``number_row`` returns each record's number as a row (``{"number": n}``) after sleeping
``KAFLEET_TEST_DELAY`` seconds; the sink adds the Kafka coordinates.
"""

from __future__ import annotations

import os
import time
from typing import Any

from kafleet import Record
from tests.infra.records import record_number

_delay = float(os.environ.get("KAFLEET_TEST_DELAY", "0"))


def number_row(record: Record) -> dict[str, Any]:
    if _delay:
        time.sleep(_delay)
    return {"number": record_number(record.value or b"")}
