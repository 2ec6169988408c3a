"""The offset tracker commits only the contiguous done prefix, moves by ranges (a run at a
time), passes the offsets a compaction left out, and never moves backwards."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafleet.engine.offsets import OffsetTracker, PartitionOffsets
from kafleet.errors import OffsetError

TP = ("orders", 0)


def test_nothing_is_committable_before_any_record_arrives() -> None:
    assert PartitionOffsets().committable() is None


def test_committable_offset_stops_at_the_first_record_not_yet_done() -> None:
    part = PartitionOffsets()
    part.add(10, 14, 5)

    part.done(12, 14, 2)
    assert part.committable() == 10
    part.done(10, 11)
    assert part.committable() == 11
    part.done(11, 12)
    assert part.committable() == 14
    part.done(14, 15)
    assert part.committable() == 15
    assert part.in_progress == 0


def test_a_run_done_in_order_moves_the_mark_by_its_whole_range() -> None:
    part = PartitionOffsets()
    assert part.add(0, 499, 500) == 0
    assert part.add(500, 999, 500) == 500

    part.done(0, 256, 256)
    assert part.committable() == 256
    part.done(256, 1000, 744)
    assert part.committable() == 1000


def test_a_range_added_after_a_gap_covers_the_gap_so_the_commit_passes_it() -> None:
    part = PartitionOffsets()
    part.add(3, 3)
    start = part.add(7, 8, 2)  # 4..6 were compacted away
    part.add(20, 20)

    assert start == 4
    part.done(3, 4)
    part.done(4, 9, 2)
    assert part.committable() == 9  # the next record is 20: fetching from 9 reads it
    part.done(9, 21)
    assert part.committable() == 21


@given(st.permutations(list(range(40))), st.integers(min_value=1, max_value=7))
def test_any_completion_order_of_runs_commits_exactly_the_lowest_offset_not_done(
    order: list[int], width: int
) -> None:
    part = PartitionOffsets()
    part.add(100, 100 + 40 * width - 1, 40 * width)
    done: set[int] = set()
    previous = part.committable()
    for i in order:  # run i covers [100 + i*width, 100 + (i+1)*width)
        part.done(100 + i * width, 100 + (i + 1) * width, width)
        done.add(i)
        expected = 100 + width * min((j for j in range(40) if j not in done), default=40)
        current = part.committable()
        assert current == expected
        assert previous is not None
        assert current is not None
        assert current >= previous
        previous = current
    assert part.in_progress == 0


def test_an_offset_added_out_of_order_is_a_bug_that_raises() -> None:
    part = PartitionOffsets()
    part.add(5, 5)
    with pytest.raises(OffsetError, match="offsets must increase"):
        part.add(4, 4)


def test_marking_a_range_done_twice_or_one_never_added_raises() -> None:
    part = PartitionOffsets()
    part.add(1, 10, 10)
    part.done(4, 6, 2)
    with pytest.raises(OffsetError, match="twice"):
        part.done(5, 6)
    with pytest.raises(OffsetError, match="twice"):
        part.done(3, 5, 2)
    part.done(1, 4, 3)
    with pytest.raises(OffsetError, match="not in progress"):
        part.done(1, 2)
    with pytest.raises(OffsetError, match="not in progress"):
        part.done(9, 12, 3)


def test_truncating_forgets_records_never_handed_over() -> None:
    part = PartitionOffsets(committed=0)
    part.add(0, 9, 10)
    part.done(0, 10, 10)  # at most once: done when handed over
    part.mark_sent(10)

    part.truncate(6)

    assert part.committable() == 6
    assert part.next_offset == 6
    assert part.sent == 0
    assert part.add(6, 6) == 6


def test_a_commit_that_would_move_backwards_raises() -> None:
    part = PartitionOffsets()
    part.mark_sent(10)
    with pytest.raises(OffsetError, match="move back"):
        part.mark_sent(9)


def test_acknowledgements_arriving_out_of_order_never_move_the_committed_offset_back() -> None:
    part = PartitionOffsets()
    part.mark_committed(1002)
    part.mark_committed(891)  # an older asynchronous commit, acknowledged late

    assert part.committed == 1002


def test_a_commit_that_was_not_acknowledged_is_offered_again() -> None:
    tracker = OffsetTracker()
    tracker.assign(TP)
    tracker.add(TP, 0, 0)
    tracker.done(TP, 0, 1)

    assert tracker.to_commit() == {TP: 1}
    assert tracker.to_commit() == {TP: 1}  # no acknowledgement yet: send it again


def test_the_tracker_offers_only_partitions_ahead_of_their_last_commit() -> None:
    tracker = OffsetTracker()
    tracker.assign(TP)
    tracker.assign(("orders", 1))
    tracker.add(TP, 0, 0)
    tracker.add(("orders", 1), 0, 0)
    tracker.done(TP, 0, 1)

    assert tracker.to_commit() == {TP: 1, ("orders", 1): 0}
    tracker.committed({TP: 1, ("orders", 1): 0})
    assert tracker.to_commit() == {}


def test_completions_for_a_removed_partition_are_ignored() -> None:
    tracker = OffsetTracker()
    tracker.assign(TP)
    tracker.add(TP, 0, 0)
    tracker.remove(TP)

    assert tracker.done(TP, 0, 1) is False
    assert tracker.to_commit() == {}


def test_a_partition_resumed_after_its_sinks_output_commits_that_point_with_no_record() -> None:
    """Exactly-once: the sink wrote up to 1480, the commit after it was lost, and the log ends
    there. No record will come, so the resume point itself must be committed."""
    tracker = OffsetTracker(gated=True)
    tracker.assign(TP)
    tracker.resume(TP, 1480)

    assert tracker.to_commit() == {TP: 1480}


def test_records_after_a_resume_point_carry_the_commit_on_from_it() -> None:
    tracker = OffsetTracker(gated=True)
    tracker.assign(TP)
    tracker.resume(TP, 972)
    assert tracker.add(TP, 975, 979, 5) == 972  # a gap after the resume point is covered

    tracker.done(TP, 972, 980, 5)
    assert tracker.to_commit() == {TP: 972}  # done, not yet written
    tracker.ship(TP, 980)
    assert tracker.to_commit() == {TP: 980}


def test_a_resume_point_never_moves_a_partition_that_has_records() -> None:
    tracker = OffsetTracker(gated=True)
    tracker.assign(TP)
    tracker.add(TP, 10, 14, 5)
    tracker.resume(TP, 500)

    assert tracker.handled(TP) == 10
