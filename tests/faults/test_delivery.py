"""How the fault tests count delivery: what the consumer handled twice is counted by offset, so
that a record the producer wrote twice (librdkafka#4953) is not the consumer's duplicate."""

from __future__ import annotations

from tests.faults.delivery import Delivery, Receipt


def test_a_record_the_log_holds_twice_is_the_producers_duplicate_not_the_consumers() -> None:
    receipts = [Receipt(0, 10, 7, 1.0), Receipt(1, 4, 7, 1.1), Receipt(0, 11, 8, 1.2)]
    delivery = Delivery({7: 0.5, 8: 0.6}, receipts)
    assert delivery.duplicates == 0
    assert delivery.written_twice == 1
    assert delivery.lost == []


def test_an_offset_handled_twice_is_the_consumers_duplicate() -> None:
    receipts = [Receipt(0, 10, 7, 1.0), Receipt(0, 10, 7, 2.0), Receipt(0, 11, 8, 2.1)]
    delivery = Delivery({7: 0.5, 8: 0.6}, receipts)
    assert delivery.duplicates == 1
    assert delivery.written_twice == 0
