"""A dead-lettered record carries its own headers and says why and where it came from."""

from __future__ import annotations

from kafleet.engine.dead_letter import dead_letter_headers
from kafleet.engine.record import Record


def test_headers_name_the_error_attempts_and_origin_after_the_records_own() -> None:
    record = Record("orders", 3, 41, b"k", b"v", headers=(("trace", b"abc"),), timestamp_ms=1234)

    headers = dead_letter_headers(record, ValueError("bad amount"), 5, "billing")

    assert headers[0] == ("trace", b"abc")
    assert dict(headers[1:]) == {
        "kafleet.error.type": b"builtins.ValueError",
        "kafleet.error.message": b"bad amount",
        "kafleet.attempts": b"5",
        "kafleet.original.topic": b"orders",
        "kafleet.original.partition": b"3",
        "kafleet.original.offset": b"41",
        "kafleet.original.timestamp": b"1234",
        "kafleet.group.id": b"billing",
    }
