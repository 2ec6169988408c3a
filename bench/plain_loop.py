"""The plain confluent-kafka loop that B11 runs beside kafleet, as its own process:
``python -m bench.plain_loop BOOTSTRAP GROUP TOPIC RECEIPTS [--session-timeout-ms N]``.

Poll, handle (sleep ``KAFLEET_TEST_DELAY``, then write a receipt as ``tests/faults/receipts.py``
does), store the offset; librdkafka commits the stored offsets every 5 s and on close: the
at-least-once loop confluent-kafka's documentation shows. SIGTERM closes the consumer (a last
commit, and a leave). Does not own what the receipts mean (``tests/faults/delivery.py``).
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from types import FrameType

from confluent_kafka import Consumer


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.plain_loop", description=__doc__)
    parser.add_argument("bootstrap")
    parser.add_argument("group")
    parser.add_argument("topic")
    parser.add_argument("receipts")
    parser.add_argument("--session-timeout-ms", type=int, default=45_000)
    args = parser.parse_args()
    delay = float(os.environ.get("KAFLEET_TEST_DELAY", "0.005"))
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "auto.offset.reset": "earliest",
            "enable.auto.offset.store": False,
            "session.timeout.ms": args.session_timeout_ms,
        }
    )
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    consumer.subscribe([args.topic])
    with open(args.receipts, "a", buffering=1) as out:
        while not stopping:
            msg = consumer.poll(0.1)
            if msg is None or msg.error() is not None:
                continue
            time.sleep(delay)
            number = (msg.value() or b"").split(b":", 1)[0].decode()
            out.write(f"{msg.partition()} {msg.offset()} {number} {time.time():.3f}\n")
            consumer.store_offsets(msg)
    consumer.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
