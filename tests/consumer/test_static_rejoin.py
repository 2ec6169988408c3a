"""Which client errors the Poller answers by joining again with a new client
(``kafleet.engine.static_rejoin``), and which stay fatal. The real refusal, on three brokers:
``tests/faults/test_worker_bounces.py`` (a static KIP-848 member killed and restarted)."""

from __future__ import annotations

from confluent_kafka import KafkaError

from kafleet.engine import static_rejoin

REFUSED = (
    "Fatal error: Broker: The instance ID is still used by another member in the consumer "
    "group: ConsumerGroupHeartbeat fatal error: Broker: The instance ID is still used by "
    "another member in the consumer group"
)
FENCED = (
    "Fatal error: Broker: Static consumer fenced by other consumer with same "
    "group.instance.id: OffsetCommit failed"
)


def test_a_fatal_error_delivered_to_the_error_callback_is_fatal_though_its_flag_is_not_set() -> (
    None
):
    error = KafkaError(KafkaError._FATAL, REFUSED)
    assert not error.fatal()
    assert static_rejoin.is_fatal(error)


def test_an_instance_id_still_held_by_an_earlier_process_is_joined_again() -> None:
    assert static_rejoin.is_unreleased_instance(KafkaError(KafkaError._FATAL, REFUSED))


def test_a_fenced_instance_stays_fatal() -> None:
    error = KafkaError(KafkaError._FATAL, FENCED)
    assert static_rejoin.is_fatal(error)
    assert not static_rejoin.is_unreleased_instance(error)


def test_transient_errors_are_neither() -> None:
    for code in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT):
        error = KafkaError(code, "Broker: The instance ID is still used by another member")
        assert not static_rejoin.is_fatal(error)
        assert not static_rejoin.is_unreleased_instance(error)
