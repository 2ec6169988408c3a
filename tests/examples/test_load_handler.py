"""The load-test handler (``examples/load.py``) that the autopilot's end-to-end tests and B8 run in
pods: it works for the record's ``work_s``, hangs only once with ``once``, and writes an
acknowledged receipt per record to the real broker before it returns."""

from __future__ import annotations

import importlib
import json
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
from confluent_kafka import Consumer, TopicPartition

from kafleet import Record
from tests.conftest import TopicFactory

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _load(monkeypatch: pytest.MonkeyPatch, **env: str) -> ModuleType:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.syspath_prepend(str(EXAMPLES))
    sys.modules.pop("load", None)
    return importlib.import_module("load")


def _record(offset: int, **body: object) -> Record:
    return Record("orders", 3, offset, None, json.dumps({"order": offset, **body}).encode())


def test_a_record_takes_its_work_s_and_others_the_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    load = _load(monkeypatch, LOAD_WORK_S="0.01", LOAD_MARKS_DIR=str(tmp_path))
    started = time.monotonic()
    load.work(_record(0, work_s=0.3))
    assert time.monotonic() - started >= 0.3
    started = time.monotonic()
    load.work(Record("orders", 3, 1, None, b"not json"))
    assert time.monotonic() - started < 0.2


def test_once_hangs_the_first_time_in_a_pod_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    load = _load(monkeypatch, LOAD_WORK_S="0", LOAD_MARKS_DIR=str(tmp_path))
    started = time.monotonic()
    load.work(_record(7, work_s=0.3, once=True))
    assert time.monotonic() - started >= 0.3
    started = time.monotonic()  # the restarted worker: the mark in /tmp is still there
    load.work(_record(7, work_s=0.3, once=True))
    assert time.monotonic() - started < 0.2


def test_each_record_handled_leaves_an_acknowledged_receipt_naming_it_and_the_pod(
    monkeypatch: pytest.MonkeyPatch, kafka: str, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    receipts = topic_factory()
    load = _load(
        monkeypatch,
        LOAD_WORK_S="0",
        LOAD_RECEIPTS_BOOTSTRAP=kafka,
        LOAD_RECEIPTS_TOPIC=receipts,
        LOAD_MARKS_DIR=str(tmp_path),
        HOSTNAME="worker-0",
    )
    for offset in range(3):
        load.work(_record(offset))
    consumer = Consumer({"bootstrap.servers": kafka, "group.id": "load-receipts"})
    consumer.assign([TopicPartition(receipts, 0, 0)])
    try:
        # Acknowledged before work() returned: all three are there at once.
        found = [json.loads(m.value()) for m in consumer.consume(3, timeout=10)]
    finally:
        consumer.close()
    assert found == [
        {"topic": "orders", "partition": 3, "offset": n, "pod": "worker-0"} for n in range(3)
    ]
