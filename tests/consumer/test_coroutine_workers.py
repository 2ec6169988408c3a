"""The event loop's workers, with in-memory queues (no broker): a handler's cancellation is a
failure of its record, not the end of a worker; a handler that never suspends cannot keep
ended runs from being finished; a stop ends idle workers quietly."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest

from kafleet.config.model import ConsumerConfig
from kafleet.config.queue_bounds import QueueBounds
from kafleet.engine.executor import Executor
from kafleet.engine.offsets import OffsetTracker
from kafleet.engine.record import Record
from kafleet.engine.work_queue import WorkQueues
from kafleet.health.state import Stats
from tests.consumer.messages import chunks, msg
from tests.infra.waiting import wait_until

TP = ("t", 0)


def executor(handler: Any, count: int, concurrency: int, ordering: str = "unordered") -> Executor:
    config = ConsumerConfig(
        bootstrap_servers="x:1",
        group_id="g",
        topics=["t"],
        concurrency=concurrency,
        on_failure="stop-partition",
        retry={"max_attempts": 2, "initial_backoff_ms": 1, "max_backoff_ms": 1},
    )
    queues = WorkQueues(QueueBounds(max_records=10**6, max_bytes=10**9), ordering, concurrency)
    queues.assign([TP])
    offsets = OffsetTracker()
    offsets.assign(TP)
    offsets.add(TP, 0, count - 1, count)
    queues.push(chunks([msg(0, n, key=str(n % 100).encode()) for n in range(count)]))
    return Executor(handler, config, queues, offsets, Stats())


def test_a_handler_cancelled_from_inside_fails_its_record_and_the_worker_goes_on() -> None:
    handled: list[int] = []

    async def handler(record: Record) -> None:
        handled.append(record.offset)
        if record.offset == 0:
            inner = asyncio.ensure_future(asyncio.sleep(10))
            inner.cancel()
            await inner  # a sub-task someone cancelled

    ex = executor(handler, 6, concurrency=2)
    ex.start()
    try:
        wait_until(lambda: ex.queues.in_flight == 0 and len(handled) >= 7, 5, "every record")
        assert sorted(set(handled)) == list(range(6))
        assert handled.count(0) == 2  # tried again, then the failure policy
        assert ex.queues.snapshot()[TP]["stopped"]
        assert ex._coroutines is not None
        assert len(ex._coroutines._workers) == 2
    finally:
        ex.stop(1)


@pytest.mark.parametrize("ordering", ["unordered", "key"])
def test_a_handler_that_never_suspends_leaves_at_most_twice_the_limit_taken(ordering: str) -> None:
    """Each worker may take the next run into the place its run leaves once per turn of the
    loop; a second run in the same turn waits for the turn's finishing."""
    seen = {"busy": 0}
    ex: Executor

    async def handler(record: Record) -> None:  # a cache hit: no await that suspends
        seen["busy"] = max(seen["busy"], ex.queues._dispatch._busy)

    ex = executor(handler, 5000, concurrency=4, ordering=ordering)
    ex.start()
    try:
        wait_until(lambda: ex.offsets.handled(TP) == 5000, 20, "every record done")
    finally:
        ex.stop(1)
    assert seen["busy"] <= 8


def test_a_stop_ends_idle_workers_without_a_word(caplog: pytest.LogCaptureFixture) -> None:
    async def handler(record: Record) -> None:
        await asyncio.sleep(0)

    ex = executor(handler, 10, concurrency=8)
    ex.start()
    wait_until(lambda: ex.offsets.handled(TP) == 10, 5, "every record done")
    with caplog.at_level(logging.ERROR):
        ex.stop(1)
        time.sleep(0.1)
        assert ex._coroutines is not None
        ex._coroutines.loop.close()
    assert all(worker.done() for worker in ex._coroutines._workers)
    assert not [r for r in caplog.records if "destroyed" in r.getMessage()]
