"""A partition's log offsets while its leader dies or moves, without a cluster: the answer
librdkafka gives for a leader that did not answer (-1001, no error) is a failure that names the
leader, never an offset; a partition is asked again in the same read only when the metadata,
asked again, says the client asked the wrong leader (another leader now, or the leader said
the client's epoch was behind), at most ``TRIES`` calls, never past the read's deadline. The
same on a real cluster: ``test_lag_on_a_rolling_cluster.py``."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from hypothesis import given
from hypothesis import strategies as st

from kafleet_operator.reading import log_offsets
from kafleet_operator.reading.snapshots import TP, Failure

P0, P1, P2 = ("orders", 0), ("orders", 1), ("orders", 2)
SILENT = -1001  # librdkafka's RD_KAFKA_OFFSET_INVALID: what a leader that did not answer gets
Answer = int | KafkaError | None  # an offset, an error, or no answer at all (a future pending)


@dataclass
class ScriptedAdmin:
    """An admin client whose ``list_offsets`` answers each call from a script: call n answers
    ``calls[n]`` (a partition missing from it answers as the last call that named it)."""

    calls: list[dict[TP, Answer]]
    asked: list[list[TP]] = field(default_factory=list)
    timeouts: list[float] = field(default_factory=list)

    def list_offsets(
        self, topic_partition_offsets: dict[TopicPartition, Any], **kwargs: Any
    ) -> dict[TopicPartition, concurrent.futures.Future[Any]]:
        script = self.calls[min(len(self.asked), len(self.calls) - 1)]
        self.asked.append([(tp.topic, tp.partition) for tp in topic_partition_offsets])
        self.timeouts.append(kwargs["request_timeout"])
        futures: dict[TopicPartition, concurrent.futures.Future[Any]] = {}
        for tp in topic_partition_offsets:
            future: concurrent.futures.Future[Any] = concurrent.futures.Future()
            answer = script[(tp.topic, tp.partition)]
            if isinstance(answer, KafkaError):
                future.set_exception(KafkaException(answer))
            elif answer is not None:
                future.set_result(SimpleNamespace(offset=answer))
            futures[tp] = future
        return futures


@dataclass
class Metadata:
    """The cluster's metadata as ``refresh`` answers it, one answer a refresh."""

    answers: list[Mapping[TP, int] | KafkaException]
    asked: int = 0

    def refresh(self, until: float) -> Mapping[TP, int]:
        answer = self.answers[min(self.asked, len(self.answers) - 1)]
        self.asked += 1
        if isinstance(answer, KafkaException):
            raise answer
        return answer


def read(
    admin: ScriptedAdmin,
    tps: list[TP],
    leaders: Mapping[TP, int],
    metadata: Metadata,
    within_s: float = 10.0,
) -> tuple[dict[TP, int], dict[TP, Failure]]:
    return log_offsets.read(
        admin, tps, "latest", time.monotonic() + within_s, leaders, metadata.refresh
    )


@pytest.fixture(autouse=True)
def no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log_offsets, "RETRY_S", 0.0)


# What one answer means.


@given(st.integers(min_value=0, max_value=2**63 - 1))
def test_an_offset_of_zero_or_more_is_the_offset(offset: int) -> None:
    assert log_offsets.answer(P0, offset, 1) == offset


@given(st.integers(max_value=-1), st.one_of(st.none(), st.integers(min_value=-1, max_value=9)))
def test_a_negative_offset_is_a_leader_that_did_not_answer_never_a_number(
    offset: int, leader: int | None
) -> None:
    failed = log_offsets.answer(P1, offset, leader)

    assert isinstance(failed, Failure)
    assert failed.code == log_offsets.NO_ANSWER
    assert "orders[1]" in failed.text
    assert "did not answer" in failed.text


def test_the_failure_names_the_leader_that_did_not_answer_when_the_metadata_named_one() -> None:
    assert log_offsets.answer(P0, SILENT, 3) == Failure(
        log_offsets.NO_ANSWER, "its leader (broker 3) did not answer for orders[0] (offset -1001)"
    )
    for unknown in (None, -1):
        failed = log_offsets.answer(P0, SILENT, unknown)
        assert isinstance(failed, Failure)
        assert failed.text.startswith("its leader did not answer")


# When a failed partition is asked again.

NO_ANSWER = Failure(log_offsets.NO_ANSWER, "its leader (broker 1) did not answer")
TIMED_OUT = Failure(KafkaError._TIMED_OUT, "no answer in 3 s")
FENCED = Failure(KafkaError.FENCED_LEADER_EPOCH, "Leader epoch is older than broker epoch")
NEWER = Failure(KafkaError.UNKNOWN_LEADER_EPOCH, "Leader epoch is newer than broker epoch")
NOT_LEADER = Failure(KafkaError.NOT_LEADER_FOR_PARTITION, "Not leader for partition")
NO_HIGH_WATERMARK = Failure(KafkaError.OFFSET_NOT_AVAILABLE, "Offset not available")
NO_TOPIC = Failure(KafkaError.UNKNOWN_TOPIC_OR_PART, "Unknown topic or partition")
DENIED = Failure(KafkaError.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed")


@pytest.mark.parametrize(
    ("failure", "before", "now", "again"),
    [
        # The leader said the client's view of it was behind: asked again, whoever leads now.
        *[(stale, 1, now, True) for stale in (FENCED, NEWER, NOT_LEADER, NO_HIGH_WATERMARK)
          for now in (1, 2, None, -1)],
        # A leader that did not answer, or not in time: asked again only once another leads.
        (NO_ANSWER, 1, 2, True),
        (NO_ANSWER, None, 2, True),
        (NO_ANSWER, 1, 1, False),  # still down, not yet fenced: another TRY_S for nothing
        (NO_ANSWER, 1, None, False),
        (NO_ANSWER, 1, -1, False),  # no leader at all (no replica in sync)
        (TIMED_OUT, 1, 3, True),
        (TIMED_OUT, 1, 1, False),
        # An answer that a move does not change: asked again only if a move makes it moot.
        (NO_TOPIC, 1, 1, False),
        (DENIED, 1, 1, False),
        (DENIED, 1, 2, True),
    ],
)  # fmt: skip
def test_a_failed_partition_is_asked_again_only_where_the_client_asked_the_wrong_leader(
    failure: Failure, before: int | None, now: int | None, again: bool
) -> None:
    assert log_offsets.ask_again(failure, before, now) is again


# Reading many partitions.


def test_a_dead_leaders_partitions_are_failures_and_the_others_offsets() -> None:
    """The issue: the broker leading 2 of 6 partitions SIGKILLed; librdkafka answered -1001
    with no error for its partitions, and the lag was read as 677 of 1,000."""
    admin = ScriptedAdmin([{P0: 200, P1: SILENT, P2: 200}])
    metadata = Metadata([{P0: 2, P1: 1, P2: 3}])  # not yet fenced: still broker 1

    found, failed = read(admin, [P0, P1, P2], {P0: 2, P1: 1, P2: 3}, metadata)

    assert found == {P0: 200, P2: 200}
    assert failed == {P1: log_offsets.answer(P1, SILENT, 1)}
    assert len(admin.asked) == 1  # the same dead leader is not asked again in this read
    assert metadata.asked == 1


def test_a_partition_whose_leader_moved_is_asked_again_in_the_same_read() -> None:
    admin = ScriptedAdmin([{P0: 200, P1: SILENT}, {P1: 180}])
    metadata = Metadata([{P0: 2, P1: 3}])  # fenced: broker 3 leads it now

    found, failed = read(admin, [P0, P1], {P0: 2, P1: 1}, metadata)

    assert (found, failed) == ({P0: 200, P1: 180}, {})
    assert admin.asked == [[P0, P1], [P1]]  # only the partition that failed


def test_a_stale_leader_epoch_is_asked_again_after_the_metadata_even_from_the_same_leader() -> None:
    """The issue: after the broker came back, 20 s of "Leader epoch is older than broker
    epoch": librdkafka sends the epoch of its cache, and does not refresh it on that error."""
    fenced = KafkaError(KafkaError.FENCED_LEADER_EPOCH, "Leader epoch is older than broker epoch")
    admin = ScriptedAdmin([{P0: fenced}, {P0: 200}])
    metadata = Metadata([{P0: 1}])

    found, failed = read(admin, [P0], {P0: 1}, metadata)

    assert (found, failed) == ({P0: 200}, {})
    assert metadata.asked == 1


def test_a_leader_that_keeps_refusing_is_asked_at_most_tries_times() -> None:
    fenced = KafkaError(KafkaError.FENCED_LEADER_EPOCH, "Leader epoch is older than broker epoch")
    admin = ScriptedAdmin([{P0: fenced}])

    found, failed = read(admin, [P0], {P0: 1}, Metadata([{P0: 1}]))

    assert found == {}
    assert failed[P0].code == KafkaError.FENCED_LEADER_EPOCH
    assert len(admin.asked) == log_offsets.TRIES


def test_metadata_that_cannot_be_asked_leaves_the_failures_as_they_were() -> None:
    admin = ScriptedAdmin([{P0: SILENT, P1: 5}])
    down = KafkaException(KafkaError(KafkaError._TRANSPORT, "all brokers down"))

    found, failed = read(admin, [P0, P1], {P0: 1, P1: 2}, Metadata([down]))

    assert found == {P1: 5}
    assert failed[P0].code == log_offsets.NO_ANSWER
    assert len(admin.asked) == 1


def test_an_answer_that_does_not_come_is_a_failure_by_the_calls_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(log_offsets, "TRY_S", 0.1)
    monkeypatch.setattr(log_offsets, "MARGIN_S", 0.0)
    admin = ScriptedAdmin([{P0: None, P1: 7}])
    started = time.monotonic()

    found, failed = read(admin, [P0, P1], {P0: 1, P1: 2}, Metadata([{P0: 1, P1: 2}]))

    assert found == {P1: 7}
    assert failed[P0].code == KafkaError._TIMED_OUT
    assert time.monotonic() - started < 1.0


def test_each_call_waits_at_most_a_try_and_never_past_the_reads_deadline() -> None:
    admin = ScriptedAdmin([{P0: 1}])

    read(admin, [P0], {P0: 1}, Metadata([{P0: 1}]), within_s=60.0)
    read(admin, [P0], {P0: 1}, Metadata([{P0: 1}]), within_s=1.0)

    assert admin.timeouts[0] == log_offsets.TRY_S
    assert admin.timeouts[1] <= 1.0


def test_no_partition_is_asked_again_once_the_deadline_is_near() -> None:
    admin = ScriptedAdmin([{P0: SILENT}, {P0: 200}])
    metadata = Metadata([{P0: 2}])

    found, failed = read(admin, [P0], {P0: 1}, metadata, within_s=0.0)

    assert found == {}
    assert P0 in failed
    assert metadata.asked == 0


def test_partitions_are_asked_in_chunks_all_in_flight_together(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(log_offsets, "CHUNK", 2)
    tps = [("orders", p) for p in range(5)]
    admin = ScriptedAdmin([dict.fromkeys(tps, 3)])

    found, failed = read(admin, tps, {}, Metadata([{}]))

    assert found == dict.fromkeys(tps, 3)
    assert failed == {}
    assert [len(chunk) for chunk in admin.asked] == [2, 2, 1]
