"""Work queues: bounded per partition, ordered by lanes, fair across partitions, and they say
when to pause and resume."""

from __future__ import annotations

import time

import pytest

from kafleet import work_queue
from kafleet.config import QueueBounds
from kafleet.record import Record
from kafleet.work_queue import WorkQueues


def rec(partition: int, offset: int, key: bytes | None = b"k", size: int = 10) -> Record:
    return Record("t", partition, offset, key, b"v" * (size - len(key or b"")))


def queues(ordering: str = "partition", concurrency: int = 100, **bounds: float) -> WorkQueues:
    q = WorkQueues(QueueBounds(**bounds), ordering, concurrency)  # type: ignore[arg-type]
    q.assign([("t", p) for p in range(4)])
    return q


def take_all(q: WorkQueues) -> list[Record]:
    """Take runs of one record until nothing more may run."""
    taken = []
    while run := q.take(timeout=0):
        taken.extend(run)
    return taken


def take_one(q: WorkQueues) -> Record:
    [record] = q.take(timeout=0)
    return record


def finish(q: WorkQueues, record: Record) -> None:
    q.complete(record)
    q.release()


def test_partition_ordering_runs_one_record_per_partition_at_a_time_in_offset_order() -> None:
    q = queues("partition")
    q.push([rec(0, 0), rec(0, 1), rec(1, 0), rec(1, 1)])

    first = take_all(q)
    assert [(r.partition, r.offset) for r in first] == [(0, 0), (1, 0)]
    finish(q, first[0])
    assert [(r.partition, r.offset) for r in take_all(q)] == [(0, 1)]


def test_key_ordering_runs_different_keys_of_one_partition_at_once_but_one_per_key() -> None:
    q = queues("key")
    q.push([rec(0, 0, b"a"), rec(0, 1, b"a"), rec(0, 2, b"b"), rec(0, 3, b"c")])

    first = take_all(q)
    assert sorted(r.offset for r in first) == [0, 2, 3]
    finish(q, next(r for r in first if r.offset == 0))
    assert [r.offset for r in take_all(q)] == [1]


def test_unordered_runs_everything_up_to_the_concurrency_limit() -> None:
    q = queues("unordered", concurrency=3)
    q.push([rec(0, i) for i in range(5)])

    first = take_all(q)
    assert len(first) == 3
    finish(q, first[0])
    assert len(take_all(q)) == 1


def test_dispatch_is_round_robin_so_a_deep_partition_does_not_starve_the_others() -> None:
    q = queues("unordered", concurrency=1000)
    q.push([rec(0, i) for i in range(50)])
    q.push([rec(1, 0), rec(2, 0)])

    order = [r.partition for r in take_all(q)][:6]

    assert order[:3] == [0, 1, 2]
    assert order.count(0) == 4


def test_the_concurrency_limit_can_change_live() -> None:
    q = queues("unordered", concurrency=1)
    q.push([rec(0, i) for i in range(5)])
    assert len(take_all(q)) == 1

    q.set_concurrency(4)

    assert len(take_all(q)) == 3


def test_a_partition_is_paused_at_its_record_bound_and_resumed_at_the_low_mark() -> None:
    q = queues("partition", max_records=10, resume_at=0.5)
    q.push([rec(0, i) for i in range(10)])

    assert q.transitions() == ([("t", 0)], [])
    assert q.transitions() == ([], [])  # reported once
    for _ in range(4):
        finish(q, take_one(q))
    assert q.transitions() == ([], [])  # 6 queued: still above the low mark of 5
    finish(q, take_one(q))
    assert q.transitions() == ([], [("t", 0)])


def test_a_partition_is_paused_at_its_byte_bound() -> None:
    q = queues("partition", max_records=1000, max_bytes=1024)
    q.push([rec(1, i, size=300) for i in range(4)])

    assert q.transitions() == ([("t", 1)], [])


def test_each_queue_says_how_many_more_records_it_may_take() -> None:
    q = queues("partition", max_records=10)
    q.push([rec(0, i) for i in range(7)])

    assert q.rooms() == {("t", 0): 3, ("t", 1): 10, ("t", 2): 10, ("t", 3): 10}
    q.push([rec(0, 7), rec(0, 8), rec(0, 9)])
    assert q.rooms()[("t", 0)] == 0


def test_records_fetched_and_not_yet_handed_over_count_towards_the_pause() -> None:
    q = queues("partition", max_records=10)
    q.push([rec(0, i) for i in range(4)])

    assert q.transitions(staged={("t", 0): (6, 60)}) == ([("t", 0)], [])


def test_a_bound_in_seconds_of_work_follows_the_measured_rate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    q = queues("partition", max_records=1000, max_seconds=2.0)
    assert q.rooms()[("t", 0)] == 1000  # no rate measured yet: the record bound
    q.push([rec(0, i) for i in range(100)])
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
    q.push([rec(0, i) for i in range(5)] + [rec(1, 0)])
    in_flight = take_one(q)

    dropped = q.close_partitions([("t", 0)])

    assert dropped == 4
    assert in_flight.partition == 0
    assert [r.partition for r in take_all(q)] == [1]
    assert q.wait_idle([("t", 0)], timeout=0) is False
    finish(q, in_flight)
    assert q.wait_idle([("t", 0)], timeout=0) is True


def test_a_record_that_outlived_its_partitions_assignment_is_not_counted_again() -> None:
    q = queues("partition")
    q.push([rec(0, 0)])
    stale = take_one(q)
    q.close_partitions([("t", 0)])
    q.remove([("t", 0)])
    q.assign([("t", 0)])  # assigned again, with a record of the same offset
    q.push([rec(0, 0)])
    marked: list[Record] = []

    q.complete(stale, lambda: marked.append(stale))
    q.release()

    assert marked == []
    assert [r.offset for r in take_all(q)] == [0]


def test_a_stopped_partition_is_paused_and_dispatches_nothing_more() -> None:
    q = queues("key")
    q.push([rec(2, 0, b"a"), rec(2, 1, b"b")])
    q.stop_partition(("t", 2), "poison")

    assert q.transitions() == ([("t", 2)], [])
    assert take_all(q) == []
    assert q.snapshot()[("t", 2)]["stopped"] == "poison"


def test_a_run_takes_consecutive_records_of_one_lane_and_the_limit_counts_runs() -> None:
    q = queues("partition", concurrency=2)
    q.push([rec(0, i) for i in range(10)] + [rec(1, i) for i in range(10)])

    first = q.take(timeout=0, max_run=4)
    second = q.take(timeout=0, max_run=4)

    assert [(r.partition, r.offset) for r in first] == [(0, 0), (0, 1), (0, 2), (0, 3)]
    assert [(r.partition, r.offset) for r in second] == [(1, 0), (1, 1), (1, 2), (1, 3)]
    assert q.take(timeout=0, max_run=4) == []  # two runs out: the limit of 2 is reached
    for record in first:
        q.complete(record)
    q.release()
    assert [r.offset for r in q.take(timeout=0, max_run=4)] == [4, 5, 6, 7]


def test_a_run_that_outlived_a_revoke_does_not_finish_the_new_assignments_run_of_that_offset() -> (
    None
):
    q = queues("partition")
    old = rec(0, 7)
    q.push([old])
    assert take_one(q) is old  # in a handler while the partition is revoked
    q.close_partitions([("t", 0)])
    q.remove([("t", 0)])
    q.assign([("t", 0)])  # ... and assigned back: offset 7 is taken again
    again, following = rec(0, 7), rec(0, 8)
    q.push([again, following])
    assert take_one(q) is again
    counted: list[Record] = []

    q.complete(old, lambda: counted.append(old))  # the old run ends
    q.release()

    assert counted == [], "the old run's completion was counted against the new one"
    assert q.snapshot()[("t", 0)]["in_flight"] == 1
    assert q.take(timeout=0) == [], "offset 8 ran beside offset 7: partition order broken"
    assert not q.is_current(old)
    assert q.is_current(again)
    finish(q, again)
    assert take_one(q) is following


def test_key_ordering_serves_partitions_round_robin_before_keys() -> None:
    q = queues("key", concurrency=1)
    crowded = [rec(0, i, key=f"k{i}".encode()) for i in range(100)]  # 100 live keys
    lonely = [rec(1, i, key=b"only") for i in range(10)]  # one key
    q.push(crowded + lonely)

    order = []
    for _ in range(20):
        record = take_one(q)
        order.append(record.partition)
        finish(q, record)

    assert order.count(1) == 10, f"the one-key partition got {order.count(1)} of 20 turns"
    assert order == [0, 1] * 10


def test_records_still_in_handlers_when_their_partition_is_forgotten_are_kept_apart() -> None:
    q = queues("partition")
    q.push([rec(0, 1), rec(1, 1)])
    hung, other = take_one(q), take_one(q)
    q.close_partitions([("t", hung.partition)])
    q.remove([("t", hung.partition)])  # a revoke that stopped waiting for it

    count, oldest = q.abandoned()
    assert count == 1
    assert oldest >= 0
    finish(q, hung)  # it ends at last
    assert q.abandoned() == (0, 0.0)
    finish(q, other)
