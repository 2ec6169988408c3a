"""The Executor's threads outlive kafleet's own defects: an error while a thread ends its run
(the offsets' bookkeeping refusing a range, a bug) is reported as the worker's fatal error,
the run goes back undone, and the thread's place is freed, so the other records still run and
a revoke's wait for the partition still ends."""

from __future__ import annotations

import time
from typing import Any

from kafleet.config.model import ConsumerConfig
from kafleet.config.queue_bounds import QueueBounds
from kafleet.engine.executor import Executor
from kafleet.engine.offsets import OffsetTracker
from kafleet.engine.work_queue import WorkQueues
from kafleet.errors import OffsetError
from kafleet.health.state import Stats
from tests.consumer.messages import chunks, msg

TP = ("t", 0)


def test_an_error_ending_a_run_frees_the_threads_place_and_the_other_records_run() -> None:
    config = ConsumerConfig(bootstrap_servers="x:1", group_id="g", topics=["t"], concurrency=1)
    queues = WorkQueues(QueueBounds(), "partition", 1)
    queues.assign([TP])
    offsets = OffsetTracker()
    offsets.assign(TP)
    offsets.add(TP, 0, 9, 10)
    marked = offsets.done_many
    calls = 0

    def refuses_once(ranges: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise OffsetError("offsets 0..0 marked done twice")
        marked(ranges)

    offsets.done_many = refuses_once  # type: ignore[method-assign]
    handled: list[int] = []
    executor = Executor(
        lambda record: handled.append(record.offset), config, queues, offsets, Stats()
    )
    executor.start()
    try:
        queues.push(chunks([msg(0, n) for n in range(10)]))
        deadline = time.monotonic() + 10
        while (len(handled) < 10 or queues.in_flight) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert handled == list(range(10))
        assert queues.in_flight == 0
        assert queues.wait_idle([TP], timeout=1)
        assert all(thread.is_alive() for thread in executor._threads)
        assert "OffsetError" in str(executor.stats.fatal_error)
        assert offsets.handled(TP) == 0  # the refused run went back undone: nothing committed
    finally:
        executor.stop(timeout=1)
