"""An example handler: bill an order event, slowly, as real work is.

Run it with the worker (from this folder, so ``orders`` is importable)::

    cd examples && kafleet worker --config worker.yaml --bootstrap-servers 127.0.0.1:9092

Each record's value is a JSON order ``{"order": 7, "customer": "ada", "amount": 32.25}``. A
record that is not valid JSON, or has no amount, raises: kafleet retries it, then parks it in
the dead-letter topic with headers saying why, and the other records go on.
"""

from __future__ import annotations

import json
import logging
import time

from kafleet import Record

log = logging.getLogger("orders")


def bill(record: Record) -> dict[str, object]:
    order = json.loads(record.value or b"")
    amount = float(order["amount"])
    time.sleep(0.02)  # a call to the payment service
    log.info(
        "billed order %s of %s: %.2f (partition %d, offset %d)",
        order["order"],
        order["customer"],
        amount,
        record.partition,
        record.offset,
    )
    return {"order": order["order"], "customer": order["customer"], "billed": amount}
