"""The fair take of each poll (KIP-41): partitions served in turn from where the last poll
stopped, each an equal share, never more than its queue has room for; what consume() returned
is split into each partition's stretches, never looked at record by record."""

from __future__ import annotations

from collections import Counter

from confluent_kafka import Message

from kafleet.engine.intake import Intake, by_partition
from tests.consumer.messages import msg

TP = tuple[str, int]


def stage(intake: Intake, messages: list[Message]) -> None:
    intake.stage(by_partition(messages, {"t"}))


def fetched_hot_first(hot: int = 1_000, cold: int = 20) -> Intake:
    """What consume() returns with one hot partition's batch ahead of three cold ones."""
    intake = Intake()
    stage(intake, [msg(0, i, size=2) for i in range(hot)])
    stage(intake, [msg(p, i, size=2) for p in (1, 2, 3) for i in range(cold)])
    return intake


ROOMY = {("t", p): 10_000 for p in range(4)}


def flat(taken: list[tuple[TP, list[Message], int]]) -> list[tuple[int, int]]:
    return [(tp[1], m.offset()) for tp, messages, _ in taken for m in messages]


def test_a_poll_takes_an_equal_share_of_every_partition_not_the_clients_order() -> None:
    taken = fetched_hot_first().take(40, ROOMY)

    assert Counter(p for p, _ in flat(taken)) == {0: 10, 1: 10, 2: 10, 3: 10}
    assert [len(messages) for _, messages, _ in taken] == [10, 10, 10, 10]  # a chunk each


def test_successive_polls_go_on_where_the_last_one_stopped() -> None:
    intake = fetched_hot_first()
    first = intake.take(2, ROOMY)
    second = intake.take(2, ROOMY)

    assert [p for p, _ in flat(first + second)] == [0, 1, 2, 3]


def test_a_partition_gets_no_more_than_its_room_and_the_rest_go_to_the_others() -> None:
    intake = fetched_hot_first()
    taken = intake.take(40, {**ROOMY, ("t", 0): 4})

    assert Counter(p for p, _ in flat(taken)) == {0: 4, 1: 12, 2: 12, 3: 12}
    assert intake.counts()[("t", 0)] == (996, 996 * 2)


def test_records_keep_their_order_within_a_partition_across_stretches() -> None:
    intake = Intake()
    stage(intake, [msg(0, 0), msg(0, 1), msg(1, 0), msg(0, 2)])
    stage(intake, [msg(0, 3), msg(1, 1)])
    taken = [pair for _ in range(30) for pair in flat(intake.take(3, ROOMY))]

    for partition in range(2):
        offsets = [o for p, o in taken if p == partition]
        assert offsets == list(range(len(offsets)))
    assert len(taken) == 6


def test_the_bytes_of_what_is_taken_and_what_waits_add_up() -> None:
    intake = Intake()
    stage(intake, [msg(0, i, size=7) for i in range(10)])

    taken = intake.take(3, ROOMY)

    assert taken[0][2] + intake.counts()[("t", 0)][1] == 70


def test_dropped_partitions_are_forgotten() -> None:
    intake = fetched_hot_first(hot=5, cold=5)
    assert intake.drop([("t", 0), ("t", 2)]) == 10

    assert {p for p, _ in flat(intake.take(100, ROOMY))} == {1, 3}
    assert len(intake) == 0


def test_stretches_of_several_topics_are_told_apart_by_topic_too() -> None:
    messages = [
        Message(topic="a", partition=0, offset=0, value=b"x"),
        Message(topic="b", partition=0, offset=0, value=b"x"),
        Message(topic="b", partition=0, offset=1, value=b"x"),
    ]

    stretches = [(tp, len(group)) for tp, group in by_partition(messages, {"a", "b"})]

    assert stretches == [(("a", 0), 1), (("b", 0), 2)]


def test_a_position_that_goes_back_drops_what_waits_of_the_old_one_so_no_chunk_goes_back() -> None:
    intake = Intake()
    stage(intake, [msg(0, o) for o in range(100, 120, 2)])  # transaction markers between
    intake.take(3, ROOMY)  # 100, 102, 104 handed over
    stage(intake, [msg(0, o) for o in range(96, 130, 2)])  # the position was reset to 96

    taken = flat(intake.take(100, ROOMY))

    assert taken == [(0, o) for o in range(96, 130, 2)]
