"""Handlers that the Spark sink's worker-process tests run with ``kafleet worker --handler``.

``number_row`` returns each record's number as a row (``{"number": n}``) after sleeping
``KAFLEET_TEST_DELAY`` seconds; the sink adds the Kafka coordinates. ``number_rows`` does the
same for a batch, sleeping the delay once per record.
"""

from __future__ import annotations

import os
import time
from typing import Any

from confluent_kafka import Message

from kafleet import Record, batch_handler
from tests.infra.records import record_number

_delay = float(os.environ.get("KAFLEET_TEST_DELAY", "0"))


def number_row(record: Record) -> dict[str, Any]:
    if _delay:
        time.sleep(_delay)
    return {"number": record_number(record.value or b"")}


@batch_handler
def number_rows(messages: list[Message]) -> list[dict[str, Any]]:
    if _delay:
        time.sleep(_delay * len(messages))
    return [{"number": record_number(m.value() or b"")} for m in messages]
