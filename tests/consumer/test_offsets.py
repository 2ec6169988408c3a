"""The offset tracker commits only the contiguous done prefix, and never moves backwards."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafleet.errors import OffsetError
from kafleet.offsets import OffsetTracker, PartitionOffsets

TP = ("orders", 0)


def test_nothing_is_committable_before_any_record_arrives() -> None:
    assert PartitionOffsets().committable() is None


def test_committable_offset_stops_at_the_first_record_not_yet_done() -> None:
    part = PartitionOffsets()
    for offset in range(10, 15):
        part.add(offset)

    part.done(12)
    part.done(13)
    assert part.committable() == 10
    part.done(10)
    assert part.committable() == 11
    part.done(11)
    assert part.committable() == 14
    part.done(14)
    assert part.committable() == 15


def test_gaps_in_offsets_such_as_compaction_leaves_are_passed_over() -> None:
    part = PartitionOffsets()
    for offset in (3, 7, 8, 20):
        part.add(offset)
    for offset in (3, 7, 8):
        part.done(offset)

    assert part.committable() == 20


@given(st.permutations(list(range(40))))
def test_any_completion_order_commits_exactly_the_lowest_offset_not_done(order: list[int]) -> None:
    part = PartitionOffsets()
    for offset in range(100, 140):
        part.add(offset)
    done: set[int] = set()
    previous = part.committable()
    for i in order:
        part.done(100 + i)
        done.add(100 + i)
        expected = min((o for o in range(100, 140) if o not in done), default=140)
        current = part.committable()
        assert current == expected
        assert previous is not None
        assert current is not None
        assert current >= previous
        previous = current


def test_an_offset_added_out_of_order_is_a_bug_that_raises() -> None:
    part = PartitionOffsets()
    part.add(5)
    with pytest.raises(OffsetError, match="offsets must increase"):
        part.add(4)


def test_marking_a_record_done_twice_or_one_never_added_raises() -> None:
    part = PartitionOffsets()
    part.add(1)
    part.done(1)
    with pytest.raises(OffsetError):
        part.done(1)
    with pytest.raises(OffsetError):
        part.done(9)


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
    tracker.add(TP, 0)
    tracker.done(TP, 0)

    assert tracker.to_commit() == {TP: 1}
    assert tracker.to_commit() == {TP: 1}  # no acknowledgement yet: send it again


def test_the_tracker_offers_only_partitions_ahead_of_their_last_commit() -> None:
    tracker = OffsetTracker()
    tracker.assign(TP)
    tracker.assign(("orders", 1))
    tracker.add(TP, 0)
    tracker.add(("orders", 1), 0)
    tracker.done(TP, 0)

    assert tracker.to_commit() == {TP: 1, ("orders", 1): 0}
    tracker.committed({TP: 1, ("orders", 1): 0})
    assert tracker.to_commit() == {}


def test_completions_for_a_removed_partition_are_ignored() -> None:
    tracker = OffsetTracker()
    tracker.assign(TP)
    tracker.add(TP, 0)
    tracker.remove(TP)

    assert tracker.done(TP, 0) is False
    assert tracker.to_commit() == {}
