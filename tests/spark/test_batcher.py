"""A partition's results are cut into contiguous batches of done offsets, by records, bytes
and linger time."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafleet.engine.record import Record
from kafleet.spark.batcher import BatchBounds, PartitionResults


def rec(offset: int, size: int = 10) -> Record:
    return Record("orders", 0, offset, None, b"x" * size)


def results(*offsets: int, size: int = 10) -> PartitionResults:
    part = PartitionResults("orders", 0)
    for offset in offsets:
        part.add(rec(offset, size), [{"n": offset}], now=0)
    return part


BIG = BatchBounds(max_records=100, max_bytes=10**6, linger_s=60)


def test_a_batch_is_cut_at_its_record_bound() -> None:
    part = results(*range(7))

    first = part.cut(7, BatchBounds(max_records=3, max_bytes=10**6, linger_s=60), now=0)

    assert first is not None
    assert [r.offset for r in first.records] == [0, 1, 2]
    assert (first.start, first.end) == (None, 3)
    assert part.shipped_to == 3
    assert len(part) == 4


def test_nothing_is_cut_before_a_bound_is_reached() -> None:
    assert results(0, 1).cut(2, BIG, now=1) is None


def test_a_lingering_result_cuts_the_batch() -> None:
    part = results(0, 1)

    batch = part.cut(2, BIG, now=60)

    assert batch is not None
    assert [r.offset for r in batch.records] == [0, 1]
    assert batch.end == 2
    assert part.since is None


def test_urgent_cuts_whatever_is_ready() -> None:
    batch = results(0).cut(1, BIG, now=0, urgent=True)

    assert batch is not None
    assert len(batch) == 1


def test_results_above_the_handled_mark_wait_for_the_records_before_them() -> None:
    part = results(0, 2, 3)  # offset 1 is still in its handler

    batch = part.cut(1, BIG, now=0, urgent=True)

    assert batch is not None
    assert [r.offset for r in batch.records] == [0]
    assert batch.end == 1
    assert len(part) == 2
    assert part.cut(1, BIG, now=0, urgent=True) is None


def test_results_finished_out_of_order_are_written_in_offset_order() -> None:
    part = PartitionResults("orders", 0)
    for offset in (4, 1, 3, 0, 2):
        part.add(rec(offset), [{"n": offset}], now=0)

    batch = part.cut(5, BIG, now=0, urgent=True)

    assert batch is not None
    assert [r.offset for r in batch.records] == [0, 1, 2, 3, 4]
    assert batch.rows == [[{"n": n}] for n in range(5)]


def test_records_that_gave_no_rows_move_the_range_on_without_a_write() -> None:
    part = PartitionResults("orders", 0)

    batch = part.cut(40, BIG, now=0)

    assert batch is not None
    assert len(batch) == 0
    assert batch.end == 40
    assert part.cut(40, BIG, now=0) is None


def test_a_gap_after_the_last_result_is_covered_by_its_batch() -> None:
    batch = results(5).cut(9, BIG, now=0, urgent=True)

    assert batch is not None
    assert batch.end == 9
    assert batch.last_offset == 5


def test_the_byte_bound_cuts_early_and_a_huge_result_makes_a_batch_of_one() -> None:
    part = results(0, 1, 2, size=600)

    batch = part.cut(3, BatchBounds(max_records=100, max_bytes=1000, linger_s=60), now=0)

    assert batch is not None
    assert [r.offset for r in batch.records] == [0, 1]
    huge = results(0, size=5000).cut(1, BatchBounds(max_bytes=1000), now=0)
    assert huge is not None
    assert len(huge) == 1


def test_a_record_is_refused_twice_or_behind_its_shipped_range() -> None:
    part = results(0)
    with pytest.raises(ValueError, match="added twice"):
        part.add(rec(0), [], now=0)
    part.cut(1, BIG, now=0, urgent=True)
    with pytest.raises(ValueError, match="after its range was shipped"):
        part.add(rec(0), [], now=0)


@given(
    finished=st.permutations(list(range(40))),
    bounds=st.builds(
        BatchBounds,
        max_records=st.integers(1, 12),
        max_bytes=st.integers(1, 200),
        linger_s=st.sampled_from([0.0, 5.0, 60.0]),
    ),
    no_rows=st.sets(st.integers(0, 39)),
    data=st.data(),
)
def test_batches_cover_every_offset_once_in_order_whatever_the_completion_order(
    finished: list[int], bounds: BatchBounds, no_rows: set[int], data: st.DataObject
) -> None:
    part = PartitionResults("orders", 0)
    done: set[int] = set()
    batches = []
    now = 0.0
    for offset in finished:
        done.add(offset)
        if offset not in no_rows:
            part.add(rec(offset), [{"n": offset}], now)
        handled = next(o for o in range(41) if o not in done)  # the offset tracker's mark
        now += data.draw(st.sampled_from([0.0, 1.0, 10.0]))
        while (
            batch := part.cut(handled, bounds, now, urgent=data.draw(st.booleans()))
        ) is not None:
            batches.append(batch)
    while (batch := part.cut(40, bounds, now, urgent=True)) is not None:
        batches.append(batch)

    ends = [b.end for b in batches]
    assert ends == sorted(set(ends))
    assert ends[-1] == 40
    for before, after in itertools.pairwise(batches):
        assert after.start == before.end  # contiguous ranges
    written = [r.offset for b in batches for r in b.records]
    assert written == sorted(set(range(40)) - no_rows)
    for batch in batches:
        assert all((batch.start or 0) <= r.offset < batch.end for r in batch.records)
        assert len(batch) <= bounds.max_records
    assert len(part) == 0
    assert part.size == 0
