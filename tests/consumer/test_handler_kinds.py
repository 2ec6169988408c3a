"""What kind of handler a user hands over: of a record or of a batch, a function or a
coroutine, however it was made."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from kafleet import batch_handler
from kafleet.engine.handlers import HandlerKind, kind_of


class Sink:
    def __init__(self) -> None:
        self.seen: list[Any] = []

    def note(self, messages: list[Any]) -> None:
        self.seen.extend(messages)

    async def note_later(self, messages: list[Any]) -> None:
        self.seen.extend(messages)


def test_a_plain_function_is_of_a_record() -> None:
    assert kind_of(lambda record: None) == HandlerKind(batch=False, coroutine=False)


def test_a_marked_function_is_marked_as_it_is() -> None:
    def handle(messages: list[Any]) -> None:
        return None

    assert batch_handler(handle) is handle
    assert kind_of(handle) == HandlerKind(batch=True, coroutine=False)


def test_a_bound_method_can_be_marked_and_still_reaches_its_object() -> None:
    sink = Sink()
    marked = batch_handler(sink.note)
    assert kind_of(marked) == HandlerKind(batch=True, coroutine=False)
    marked([1, 2])
    assert sink.seen == [1, 2]
    assert kind_of(sink.note) == HandlerKind(batch=False, coroutine=False)  # left unmarked


def test_a_bound_coroutine_method_stays_a_coroutine_once_marked() -> None:
    sink = Sink()
    marked = batch_handler(sink.note_later)
    assert kind_of(marked) == HandlerKind(batch=True, coroutine=True)
    asyncio.run(marked([3]))
    assert sink.seen == [3]


def test_a_partial_can_be_marked() -> None:
    seen: list[Any] = []
    marked = batch_handler(functools.partial(lambda out, messages: out.extend(messages), seen))
    assert kind_of(marked).batch
    marked([4])
    assert seen == [4]
