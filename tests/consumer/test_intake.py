"""The fair take of each poll (KIP-41): partitions served in turn from where the last poll
stopped, each an equal share, never more than its queue has room for."""

from __future__ import annotations

from collections import Counter

from kafleet.intake import Intake
from kafleet.record import Record


def rec(partition: int, offset: int) -> Record:
    return Record("t", partition, offset, b"k", b"v")


def fetched_hot_first(hot: int = 1_000, cold: int = 20) -> Intake:
    """What consume() returns with one hot partition's batch ahead of three cold ones."""
    intake = Intake()
    intake.stage([rec(0, i) for i in range(hot)])
    intake.stage([rec(p, i) for p in (1, 2, 3) for i in range(cold)])
    return intake


ROOMY = {("t", p): 10_000 for p in range(4)}


def test_a_poll_takes_an_equal_share_of_every_partition_not_the_clients_order() -> None:
    taken = fetched_hot_first().take(40, ROOMY)

    assert Counter(r.partition for r in taken) == {0: 10, 1: 10, 2: 10, 3: 10}


def test_successive_polls_go_on_where_the_last_one_stopped() -> None:
    intake = fetched_hot_first()
    first = intake.take(2, ROOMY)
    second = intake.take(2, ROOMY)

    assert [r.partition for r in first + second] == [0, 1, 2, 3]


def test_a_partition_gets_no_more_than_its_room_and_the_rest_go_to_the_others() -> None:
    intake = fetched_hot_first()
    taken = intake.take(40, {**ROOMY, ("t", 0): 4})

    assert Counter(r.partition for r in taken) == {0: 4, 1: 12, 2: 12, 3: 12}
    assert intake.counts()[("t", 0)] == (996, 996 * 2)


def test_records_keep_their_order_within_a_partition() -> None:
    intake = fetched_hot_first()
    taken = [r for _ in range(30) for r in intake.take(7, ROOMY)]

    for partition in range(4):
        offsets = [r.offset for r in taken if r.partition == partition]
        assert offsets == sorted(offsets)
        assert offsets == list(range(len(offsets)))


def test_dropped_partitions_are_forgotten() -> None:
    intake = fetched_hot_first(hot=5, cold=5)
    assert intake.drop([("t", 0), ("t", 2)]) == 10

    assert {r.partition for r in intake.take(100, ROOMY)} == {1, 3}
    assert len(intake) == 0
