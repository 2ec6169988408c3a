"""A load-test handler: work of a known duration, and a receipt for every record handled.

Load tests and benchmarks need a handler whose cost they choose and whose every call they can
count, even after the pod that made it is gone (scaled down, deleted, restarted). ``work``
sleeps for the record's ``work_s`` (a JSON field), else ``LOAD_WORK_S`` (default 0.05 s): I/O
bound, as slow real work is. When ``LOAD_RECEIPTS_TOPIC`` is set, it then writes a receipt,
``{"topic", "partition", "offset", "pod"}``, to that topic (on ``LOAD_RECEIPTS_BOOTSTRAP``)
and waits for the broker's acknowledgement before returning, so a record whose offset is
committed always has its receipt: the reader counts records lost (no receipt) and handled
twice (two receipts).

    {"order": 7, "work_s": 0.2}                 # 200 ms of work
    {"order": 8, "work_s": 3600}                # a handler that hangs
    {"order": 9, "work_s": 3600, "once": true}  # hangs the first time in its pod only

``once`` leaves a mark in ``LOAD_MARKS_DIR`` (default ``/tmp``, an emptyDir that outlives a
container restart), so a worker restarted by its liveness probe handles the record at once: a
transient hang, as a stuck connection is.

Run it like ``orders.py``: ``handler: load:work``.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from confluent_kafka import KafkaException, Producer

from kafleet import Record

DEFAULT_WORK_S = float(os.environ.get("LOAD_WORK_S", "0.05"))
RECEIPTS_TOPIC = os.environ.get("LOAD_RECEIPTS_TOPIC", "")
MARKS = Path(os.environ.get("LOAD_MARKS_DIR", "/tmp"))
POD = os.environ.get("HOSTNAME", "")

_producer: Producer | None = None
_lock = threading.Lock()


def _receipts() -> Producer:
    global _producer
    with _lock:
        if _producer is None:
            _producer = Producer(
                {
                    "bootstrap.servers": os.environ["LOAD_RECEIPTS_BOOTSTRAP"],
                    "linger.ms": 2,
                    "enable.idempotence": True,
                }
            )
        return _producer


def _send(record: Record) -> None:
    producer = _receipts()
    done = threading.Event()
    failed: list[str] = []

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            failed.append(str(err))
        done.set()

    receipt = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "pod": POD,
    }
    producer.produce(RECEIPTS_TOPIC, value=json.dumps(receipt), on_delivery=delivered)
    while not done.is_set():
        producer.poll(0.05)
    if failed:
        raise KafkaException(failed[0])  # retried by kafleet, as any failed call


def work(record: Record) -> None:
    seconds = DEFAULT_WORK_S
    if record.value:
        try:
            body = json.loads(record.value)
        except ValueError:
            body = None
        if isinstance(body, dict) and "work_s" in body:
            seconds = float(body["work_s"])
            if body.get("once"):
                mark = MARKS / f"load-{record.topic}-{record.partition}-{record.offset}"
                if mark.exists():
                    seconds = DEFAULT_WORK_S
                else:
                    mark.touch()
    time.sleep(seconds)
    if RECEIPTS_TOPIC:
        _send(record)
