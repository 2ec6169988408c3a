"""Work queues: bounded per partition, ordered by lanes, fair across partitions, and they say
when to pause and resume; records travel as chunks and leave as runs."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Message

from kafleet.config.queue_bounds import QueueBounds
from kafleet.engine import work_queue
from kafleet.engine.runs import Run
from kafleet.engine.work_queue import WorkQueues
from tests.consumer.messages import chunks, msg, where


def queues(ordering: str = "partition", concurrency: int = 100, **bounds: float) -> WorkQueues:
    q = WorkQueues(QueueBounds(**bounds), ordering, concurrency)  # type: ignore[arg-type]
    q.assign([("t", p) for p in range(4)])
    return q


def push(q: WorkQueues, messages: list[Message]) -> None:
    q.push(chunks(messages))


def take_all(q: WorkQueues) -> list[Run]:
    """Take runs of one record until nothing more may run."""
    taken = []
    while run := q.take(timeout=0):
        taken.append(run)
    return taken


def take_one(q: WorkQueues) -> Run:
    run = q.take(timeout=0)
    assert run is not None
    assert len(run) == 1
    return run


def finish(q: WorkQueues, run: Run) -> None:
    q.finish(run)
    q.release()


def offsets(runs: list[Run]) -> list[tuple[int, int]]:
    return [pair for run in runs for pair in where(run)]


def test_partition_ordering_runs_one_record_per_partition_at_a_time_in_offset_order() -> None:
    q = queues("partition")
    push(q, [msg(0, 0), msg(0, 1), msg(1, 0), msg(1, 1)])

    first = take_all(q)
    assert offsets(first) == [(0, 0), (1, 0)]
    finish(q, first[0])
    assert offsets(take_all(q)) == [(0, 1)]


def test_key_ordering_runs_different_keys_of_one_partition_at_once_but_one_per_key() -> None:
    q = queues("key")
    push(q, [msg(0, 0, b"a"), msg(0, 1, b"a"), msg(0, 2, b"b"), msg(0, 3, b"c")])

    first = take_all(q)
    assert sorted(o for _, o in offsets(first)) == [0, 2, 3]
    finish(q, next(r for r in first if where(r) == [(0, 0)]))
    assert offsets(take_all(q)) == [(0, 1)]


def test_unordered_runs_everything_up_to_the_concurrency_limit() -> None:
    q = queues("unordered", concurrency=3)
    push(q, [msg(0, i) for i in range(5)])

    first = take_all(q)
    assert len(first) == 3
    finish(q, first[0])
    assert len(take_all(q)) == 1


def test_dispatch_is_round_robin_so_a_deep_partition_does_not_starve_the_others() -> None:
    q = queues("unordered", concurrency=1000)
    push(q, [msg(0, i) for i in range(50)])
    push(q, [msg(1, 0), msg(2, 0)])

    order = [p for p, _ in offsets(take_all(q))][:6]

    assert order[:3] == [0, 1, 2]
    assert order.count(0) == 4


def test_the_concurrency_limit_can_change_live() -> None:
    q = queues("unordered", concurrency=1)
    push(q, [msg(0, i) for i in range(5)])
    assert len(take_all(q)) == 1

    q.set_concurrency(4)

    assert len(take_all(q)) == 3


def test_a_partition_is_paused_at_its_record_bound_and_resumed_at_the_low_mark() -> None:
    q = queues("partition", max_records=10, resume_at=0.5)
    push(q, [msg(0, i) for i in range(10)])

    assert q.transitions() == ([("t", 0)], [])
    assert q.transitions() == ([], [])  # reported once
    for _ in range(4):
        finish(q, take_one(q))
    assert q.transitions() == ([], [])  # 6 queued: still above the low mark of 5
    finish(q, take_one(q))
    assert q.transitions() == ([], [("t", 0)])


def test_a_partition_is_paused_at_its_byte_bound() -> None:
    q = queues("partition", max_records=1000, max_bytes=1024)
    push(q, [msg(1, i, size=300) for i in range(4)])

    assert q.transitions() == ([("t", 1)], [])


def test_each_queue_says_how_many_more_records_it_may_take() -> None:
    q = queues("partition", max_records=10)
    push(q, [msg(0, i) for i in range(7)])

    assert q.rooms() == {("t", 0): 3, ("t", 1): 10, ("t", 2): 10, ("t", 3): 10}
    push(q, [msg(0, 7), msg(0, 8), msg(0, 9)])
    assert q.rooms()[("t", 0)] == 0


def test_records_fetched_and_not_yet_handed_over_count_towards_the_pause() -> None:
    q = queues("partition", max_records=10)
    push(q, [msg(0, i) for i in range(4)])

    assert q.transitions(staged={("t", 0): (6, 60)}) == ([("t", 0)], [])


def test_a_bound_in_seconds_of_work_follows_the_measured_rate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    q = queues("partition", max_records=1000, max_seconds=2.0)
    assert q.rooms()[("t", 0)] == 1000  # no rate measured yet: the record bound
    push(q, [msg(0, i) for i in range(100)])
    clock = [time.monotonic()]
    monkeypatch.setattr(work_queue.time, "monotonic", lambda: clock[0])
    q.transitions()  # the window starts
    for _ in range(50):  # 50 records handled in 2 s: 25 a second
        finish(q, take_one(q))
    clock[0] += 2.0

    pause, _ = q.transitions()

    assert q.snapshot()[("t", 0)]["queue_bound"] == 50  # 2 s of work at 25 a second
    assert q.rooms()[("t", 0)] == 0  # 50 still queued
    assert pause == [("t", 0)]


def test_closing_a_partition_drops_its_queue_and_dispatches_nothing_more_from_it() -> None:
    q = queues("partition")
    push(q, [msg(0, i) for i in range(5)] + [msg(1, 0)])
    in_flight = take_one(q)

    dropped = q.close_partitions([("t", 0)])

    assert dropped == 4
    assert where(in_flight) == [(0, 0)]
    assert offsets(take_all(q)) == [(1, 0)]
    assert q.wait_idle([("t", 0)], timeout=0) is False
    finish(q, in_flight)
    assert q.wait_idle([("t", 0)], timeout=0) is True


def test_a_run_that_outlived_its_partitions_assignment_is_not_counted_again() -> None:
    q = queues("partition")
    push(q, [msg(0, 0)])
    stale = take_one(q)
    q.close_partitions([("t", 0)])
    q.remove([("t", 0)])
    q.assign([("t", 0)])  # assigned again, with a record of the same offset
    push(q, [msg(0, 0)])
    marked: list[Run] = []

    q.finish(stale, mark_done=marked.append)
    q.release()

    assert marked == []
    assert offsets(take_all(q)) == [(0, 0)]


def test_a_stopped_partition_is_paused_and_dispatches_nothing_more() -> None:
    q = queues("key")
    push(q, [msg(2, 0, b"a"), msg(2, 1, b"b")])
    q.stop_partition(("t", 2), "poison")

    assert q.transitions() == ([("t", 2)], [])
    assert take_all(q) == []
    assert q.snapshot()[("t", 2)]["stopped"] == "poison"


def test_a_run_takes_consecutive_records_of_one_lane_and_the_limit_counts_runs() -> None:
    q = queues("partition", concurrency=2)
    push(q, [msg(0, i) for i in range(10)] + [msg(1, i) for i in range(10)])

    first = q.take(timeout=0, max_run=4)
    second = q.take(timeout=0, max_run=4)

    assert where(first) == [(0, 0), (0, 1), (0, 2), (0, 3)]
    assert where(second) == [(1, 0), (1, 1), (1, 2), (1, 3)]
    assert q.take(timeout=0, max_run=4) is None  # two runs out: the limit of 2 is reached
    assert first is not None
    q.finish(first)
    q.release()
    assert where(q.take(timeout=0, max_run=4)) == [(0, 4), (0, 5), (0, 6), (0, 7)]


def test_a_run_spans_the_chunks_of_successive_polls_with_one_range() -> None:
    q = queues("partition")
    push(q, [msg(0, 0), msg(0, 1)])
    push(q, [msg(0, 2), msg(0, 3)])

    run = q.take(timeout=0, max_run=10)

    assert run is not None
    assert where(run) == [(0, 0), (0, 1), (0, 2), (0, 3)]
    assert run.ranges == [(0, 4, 4)]
    assert run.size == 40


def test_the_range_of_a_run_taken_from_inside_a_chunk_covers_the_offsets_left_out() -> None:
    q = queues("partition")
    push(q, [msg(0, 10), msg(0, 13), msg(0, 14), msg(0, 20)])  # compacted: gaps between

    first = q.take(timeout=0, max_run=2)
    assert first is not None
    q.finish(first)
    q.release()
    second = q.take(timeout=0, max_run=2)

    assert first.ranges == [(10, 14, 2)]
    assert second is not None
    assert second.ranges == [(14, 21, 2)]


def test_finishing_part_of_a_run_leaves_the_rest_in_flight() -> None:
    q = queues("partition")
    push(q, [msg(0, i) for i in range(5)])
    run = q.take(timeout=0, max_run=5)
    assert run is not None
    marked: list[Run] = []

    q.finish(run, 2, mark_done=marked.append)

    assert [where(r) for r in marked] == [[(0, 0), (0, 1)]]
    assert marked[0].ranges == [(0, 2, 2)]
    assert run.ranges == [(2, 5, 3)]
    assert q.snapshot()[("t", 0)]["in_flight"] == 3
    q.finish(run, mark_done=marked.append)
    q.release()
    assert q.snapshot()[("t", 0)]["in_flight"] == 0


def test_a_run_that_outlived_a_revoke_does_not_finish_the_new_assignments_run_of_that_offset() -> (
    None
):
    q = queues("partition")
    push(q, [msg(0, 7)])
    old = take_one(q)  # in a handler while the partition is revoked
    q.close_partitions([("t", 0)])
    q.remove([("t", 0)])
    q.assign([("t", 0)])  # ... and assigned back: offset 7 is taken again
    push(q, [msg(0, 7), msg(0, 8)])
    again = take_one(q)
    counted: list[Run] = []

    q.finish(old, mark_done=counted.append)  # the old run ends
    q.release()

    assert counted == [], "the old run's completion was counted against the new one"
    assert q.snapshot()[("t", 0)]["in_flight"] == 1
    assert q.take(timeout=0) is None, "offset 8 ran beside offset 7: partition order broken"
    assert not q.is_current(old)
    assert q.is_current(again)
    finish(q, again)
    assert where(take_one(q)) == [(0, 8)]


def test_key_ordering_serves_partitions_round_robin_before_keys() -> None:
    q = queues("key", concurrency=1)
    crowded = [msg(0, i, key=f"k{i}".encode()) for i in range(100)]  # 100 live keys
    lonely = [msg(1, i, key=b"only") for i in range(10)]  # one key
    push(q, crowded + lonely)

    order = []
    for _ in range(20):
        run = take_one(q)
        order.append(run.tp[1])
        finish(q, run)

    assert order.count(1) == 10, f"the one-key partition got {order.count(1)} of 20 turns"
    assert order == [0, 1] * 10


def test_key_lanes_ranges_cover_every_offset_of_the_partition() -> None:
    q = queues("key")
    push(q, [msg(0, 3, b"a"), msg(0, 5, b"b"), msg(0, 9, b"a")])

    runs = take_all(q)
    for run in runs:
        finish(q, run)
    runs += take_all(q)

    ranges = sorted(r for run in runs for r in run.ranges)
    assert ranges == [(3, 4, 1), (4, 6, 1), (6, 10, 1)]


def test_records_still_in_handlers_when_their_partition_is_forgotten_are_kept_apart() -> None:
    q = queues("partition")
    push(q, [msg(0, 1), msg(1, 1)])
    hung, other = take_one(q), take_one(q)
    q.close_partitions([hung.tp])
    q.remove([hung.tp])  # a revoke that stopped waiting for it

    count, oldest = q.abandoned()
    assert count == 1
    assert oldest >= 0
    finish(q, hung)  # it ends at last
    assert q.abandoned() == (0, 0.0)
    finish(q, other)


def test_more_runs_are_taken_at_once_up_to_the_concurrency_limit() -> None:
    q = queues("key", concurrency=5)
    push(q, [msg(0, i, key=f"k{i}".encode()) for i in range(10)])
    first = q.take(timeout=0)

    more = q.take_more(10)

    assert first is not None
    assert len(more) == 4
    assert q.take_more(10) == []


def test_key_lanes_count_each_records_bytes_so_nothing_is_left_counted_once_taken() -> None:
    q = queues("key")
    for poll in range(50):  # chunks whose sizes do not divide evenly among their records
        q.push(chunks([msg(0, poll * 3 + i, key=bytes([i]), size=7 + i * 5) for i in range(3)]))
        for run in take_all(q):
            finish(q, run)

    assert q.snapshot()[("t", 0)]["queued_bytes"] == 0


def test_finishing_a_run_twice_changes_nothing() -> None:
    q = queues("partition")
    push(q, [msg(0, 0), msg(0, 1)])
    run = q.take(timeout=0, max_run=2)
    assert run is not None
    q.finish(run)

    q.finish(run)
    q.finish(run, 1)

    assert q.in_flight == 0


def test_a_released_thread_takes_its_next_run_in_the_same_step_and_wakes_no_other() -> None:
    q = queues("partition", concurrency=1)
    push(q, [msg(0, 0), msg(0, 1)])
    run = take_one(q)
    q.finish(run)
    woken: list[Run | None] = []
    waiter = threading.Thread(target=lambda: woken.append(q.take(timeout=0.3)))
    waiter.start()
    time.sleep(0.05)  # the other thread waits in take()
    follow = q.release(max_run=1)
    assert follow is not None
    assert where(follow) == [(0, 1)]
    waiter.join()
    assert woken == [None]  # nothing was left for it, and the limit was taken again at once


def test_a_release_takes_nothing_above_a_lowered_concurrency_limit() -> None:
    q = queues("unordered", concurrency=2)
    push(q, [msg(0, 0), msg(0, 1), msg(0, 2)])
    first, _ = take_one(q), take_one(q)
    q.set_concurrency(1)
    q.finish(first)
    assert q.release(max_run=1) is None  # one run is still out: the limit of 1 is reached
