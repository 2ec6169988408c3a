"""A batch that fails, without a broker: the Executor's threads and its event loop over real
queues and a real offset tracker. A poison record that stops its partition hands the rest of
its batch back undone, whatever the handler's kind."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from confluent_kafka import Message

from kafleet import batch_handler, load_config
from kafleet.engine.executor import Executor
from kafleet.engine.offsets import OffsetTracker
from kafleet.engine.runs import Chunk
from kafleet.engine.work_queue import WorkQueues
from kafleet.health.state import Stats
from tests.infra.waiting import wait_until

TP = ("t", 0)


def run_executor(handler: Any, count: int = 5) -> tuple[WorkQueues, OffsetTracker, Stats]:
    """One partition's ``count`` records through an Executor with ``stop-partition``."""
    config = load_config(
        None,
        {
            "bootstrap_servers": "unused:9092",
            "group_id": "g",
            "topics": ["t"],
            "on_failure": "stop-partition",
            "retry": {"max_attempts": 2, "initial_backoff_ms": 1},
        },
    )
    queues = WorkQueues(config.queue, "partition", 4)
    queues.assign([TP])
    offsets = OffsetTracker()
    offsets.assign(TP)
    stats = Stats()
    messages = [Message(topic="t", partition=0, offset=o, value=b"v") for o in range(count)]
    [start] = offsets.add_many([(TP, 0, count - 1, count)])
    executor = Executor(handler, config, queues, offsets, stats)
    queues.push([Chunk(TP, start, messages, count)])
    executor.start()
    try:
        wait_until(lambda: queues.snapshot()[TP]["stopped"] is not None, 10, "the stop")
        wait_until(lambda: queues.in_flight == 0, 10, "nothing in flight")
    finally:
        executor.stop()
    return queues, offsets, stats


def poisoned(calls: list[list[int]], poison: int) -> Any:
    lock = threading.Lock()

    def note(messages: list[Message]) -> None:
        offsets = [m.offset() or 0 for m in messages]
        with lock:
            calls.append(offsets)
        if poison in offsets:
            raise RuntimeError("poison")

    return note


@pytest.mark.parametrize("coroutine", [False, True])
def test_a_poison_record_that_stops_its_partition_hands_the_rest_of_its_batch_back(
    coroutine: bool,
) -> None:
    calls: list[list[int]] = []
    note = poisoned(calls, poison=1)
    if coroutine:

        async def handle(messages: list[Message]) -> None:
            note(messages)

    else:

        def handle(messages: list[Message]) -> None:
            note(messages)

    _queues, offsets, _ = run_executor(batch_handler(handle))

    assert calls == [[0, 1, 2, 3, 4], [0, 1, 2, 3, 4], [0], [1], [1]]
    _committed, committable, in_progress = offsets.snapshot()[TP]
    assert committable == 1, "records after the poison one were marked done"
    assert in_progress == 4


def test_a_handler_of_one_record_that_stops_its_partition_hands_the_rest_back() -> None:
    calls: list[list[int]] = []
    note = poisoned(calls, poison=2)

    def handle(record: Any) -> None:
        note([Message(topic="t", partition=0, offset=record.offset)])

    _queues, offsets, stats = run_executor(handle)

    assert calls == [[0], [1], [2], [2]]
    assert offsets.snapshot()[TP][1] == 2
    assert stats.records_processed == 2


@pytest.mark.parametrize("coroutine", [False, True])
def test_a_batch_of_one_record_gets_the_retry_policys_attempts_not_twice_as_many(
    coroutine: bool,
) -> None:
    calls: list[list[int]] = []
    note = poisoned(calls, poison=0)
    if coroutine:

        async def handle(messages: list[Message]) -> None:
            note(messages)

    else:

        def handle(messages: list[Message]) -> None:
            note(messages)

    run_executor(batch_handler(handle), count=1)

    assert calls == [[0], [0]]  # retry.max_attempts is 2
