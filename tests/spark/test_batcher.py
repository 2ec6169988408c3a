"""Results are grouped per partition into batches bounded by records, bytes and linger time."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafleet.batcher import BatchBounds, Batcher
from kafleet.record import Record


def rec(partition: int, offset: int) -> Record:
    return Record("orders", partition, offset, None, None)


def test_a_batch_closes_at_its_record_bound() -> None:
    batcher = Batcher(BatchBounds(max_records=3, max_bytes=10**6, linger_s=60))

    closed = [b for i in range(7) for b in batcher.add(rec(0, i), i, 10, now=0)]

    assert [[r.offset for r in b.records] for b in closed] == [[0, 1, 2], [3, 4, 5]]
    assert [(b.first_offset, b.last_offset) for b in closed] == [(0, 2), (3, 5)]


def test_a_result_that_does_not_fit_closes_the_open_batch_first() -> None:
    batcher = Batcher(BatchBounds(max_records=100, max_bytes=100, linger_s=60))
    batcher.add(rec(0, 0), "a", 60, now=0)

    closed = batcher.add(rec(0, 1), "b", 60, now=0)

    assert [b.results for b in closed] == [["a"]]
    assert [b.results for b in batcher.flush()] == [["b"]]


def test_a_result_larger_than_the_byte_bound_makes_a_batch_of_one() -> None:
    batcher = Batcher(BatchBounds(max_records=100, max_bytes=100, linger_s=60))

    closed = batcher.add(rec(0, 0), "huge", 500, now=0)

    assert [(len(b), b.size) for b in closed] == [(1, 500)]


def test_a_batch_closes_after_lingering_and_partitions_batch_apart() -> None:
    batcher = Batcher(BatchBounds(max_records=100, max_bytes=10**6, linger_s=1.0))
    batcher.add(rec(0, 0), 0, 1, now=10.0)
    batcher.add(rec(1, 0), 0, 1, now=10.5)

    assert batcher.next_deadline() == 11.0
    assert batcher.due(now=10.9) == []
    assert [b.partition for b in batcher.due(now=11.0)] == [0]
    assert [b.partition for b in batcher.due(now=11.6)] == [1]
    assert batcher.next_deadline() is None


def test_flushing_a_revoked_partition_leaves_the_others_open() -> None:
    batcher = Batcher(BatchBounds(linger_s=60))
    batcher.add(rec(0, 0), 0, 1, now=0)
    batcher.add(rec(1, 0), 0, 1, now=0)

    assert [b.partition for b in batcher.flush([("orders", 1)])] == [1]
    assert [b.partition for b in batcher.flush()] == [0]


def test_bounds_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        BatchBounds(max_records=0)


@given(
    sizes=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 300)), max_size=200),
    max_records=st.integers(1, 20),
    max_bytes=st.integers(1, 1000),
)
def test_every_result_lands_in_exactly_one_batch_in_order_and_within_bounds(
    sizes: list[tuple[int, int]], max_records: int, max_bytes: int
) -> None:
    batcher = Batcher(BatchBounds(max_records=max_records, max_bytes=max_bytes, linger_s=60))
    closed = []
    for offset, (partition, size) in enumerate(sizes):
        closed += batcher.add(rec(partition, offset), offset, size, now=0)
    closed += batcher.flush()

    offsets = sorted(r.offset for b in closed for r in b.records)
    assert offsets == list(range(len(sizes)))
    for batch in closed:
        assert {r.partition for r in batch.records} == {batch.partition}
        assert [r.offset for r in batch.records] == sorted(r.offset for r in batch.records)
        assert 1 <= len(batch) <= max_records
        assert batch.size <= max_bytes or len(batch) == 1
