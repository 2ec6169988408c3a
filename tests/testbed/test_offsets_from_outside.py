"""Reading offsets from outside asks again through what a rolling cluster answers for a moment,
and only that."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from tests.infra import offsets


def _failure(code: int) -> KafkaException:
    return KafkaException(KafkaError(code))


@pytest.mark.parametrize(
    "code",
    [
        KafkaError.OFFSET_NOT_AVAILABLE,  # a new leader's high watermark not caught up yet
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
    ],
)
def test_a_log_end_is_asked_again_while_a_leader_comes_up(code: int) -> None:
    assert offsets.transient(_failure(code), offsets.LEADER_COMING_UP)


@pytest.mark.parametrize("code", list(offsets.COORDINATOR_MOVING))
def test_committed_offsets_are_asked_again_while_the_coordinator_moves(code: int) -> None:
    assert offsets.transient(_failure(code), offsets.COORDINATOR_MOVING)


def test_an_authorization_failure_is_not_asked_again() -> None:
    failure = _failure(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    assert not offsets.transient(failure, offsets.LEADER_COMING_UP | offsets.COORDINATOR_MOVING)
