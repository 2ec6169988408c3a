"""What a handler is: one record at a time or a batch at a time, a function or a coroutine.

Owns: the handler types, the ``batch_handler`` marker, telling the four kinds apart, and the
contract of a batch handler's results. A handler of one record takes a ``Record`` and returns
its result (rows for the sink, or None). A batch handler, marked with ``@batch_handler``,
takes a list of the client's ``Message`` objects (up to ``max_batch_records`` consecutive
records of one partition, or of one key with ``ordering: key``, in offset order) and returns
None (no results), a sequence with one result per message, in the same order, or an Arrow
table (``pyarrow.Table`` or ``RecordBatch``) with one row per message, in the same order: the
columnar way, whose rows reach the sink without a Python object per row.

    @kafleet.batch_handler
    def handle(messages):             # or: async def handle(messages)
        return [{"id": m.key()} for m in messages]

    @kafleet.batch_handler
    def handle_columns(messages):
        return pyarrow.table({"id": [m.key() for m in messages]})

Does not own running handlers (``executor.py``, ``function_runs.py``, ``coroutines.py``),
retries or failure policies (``failure_policy.py``).
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from confluent_kafka import Message

from kafleet.engine.record import Record

RecordHandler = Callable[[Record], Any] | Callable[[Record], Awaitable[Any]]
BatchHandler = (
    Callable[[list[Message]], Sequence[Any] | None]
    | Callable[[list[Message]], Awaitable[Sequence[Any] | None]]
)
Handler = RecordHandler | BatchHandler
F = TypeVar("F", bound=Callable[..., Any])
_MARK = "__kafleet_batch__"


def batch_handler(function: F) -> F:
    """Mark ``function`` (a function or a coroutine function) as taking a list of messages.

    A function is marked as it is; what takes no attribute (a bound method, a builtin) is
    marked through a thin wrapper of the same kind."""
    try:
        setattr(function, _MARK, True)
        return function
    except (AttributeError, TypeError):
        pass
    marked: Callable[..., Any]
    if inspect.iscoroutinefunction(function):

        async def marked_coroutine(messages: list[Message]) -> Any:
            return await function(messages)

        marked = marked_coroutine
    else:

        def marked_function(messages: list[Message]) -> Any:
            return function(messages)

        marked = marked_function
    marked = functools.wraps(function)(marked)
    setattr(marked, _MARK, True)
    return cast(F, marked)


@dataclass(frozen=True)
class HandlerKind:
    batch: bool  # takes a list of messages
    coroutine: bool  # an ``async def``

    def __str__(self) -> str:
        return f"{'coroutine' if self.coroutine else 'function'} of a " + (
            "batch" if self.batch else "record"
        )


def kind_of(handler: Handler) -> HandlerKind:
    return HandlerKind(bool(getattr(handler, _MARK, False)), inspect.iscoroutinefunction(handler))


def is_table(results: object) -> bool:
    """Whether a batch handler returned an Arrow table (pyarrow is only looked at if the
    handler imported it)."""
    pa = sys.modules.get("pyarrow")
    return pa is not None and isinstance(results, (pa.Table, pa.RecordBatch))


def batch_results(results: object, count: int) -> Sequence[Any] | Any | None:
    """A batch handler's return value, checked: None, one result per message, or an Arrow
    table of one row per message. Anything else is the handler's mistake, raised as a
    ``TypeError`` that says what came back (the batch then fails like any handler error)."""
    if results is None:
        return None
    if is_table(results):
        rows = results.num_rows  # type: ignore[attr-defined]
        if rows != count:
            raise TypeError(
                f"a batch handler returned a table of {rows} rows for {count} messages (one "
                f"row per message; return a list with None where a message has no row)"
            )
        return results
    if isinstance(results, (str, bytes, dict)) or not isinstance(results, Sequence):
        raise TypeError(
            f"a batch handler returns None, a list with one result per message or an Arrow "
            f"table with one row per message; it returned {type(results).__name__}"
        )
    if len(results) != count:
        raise TypeError(
            f"a batch handler returned {len(results)} results for {count} messages (one per "
            f"message, None where a message has none)"
        )
    return results


def first_result(results: Sequence[Any] | Any | None) -> Any:
    """The result of a batch of one: its one item, or its table's one row as a dict."""
    if results is None:
        return None
    if is_table(results):
        return cast(Any, results).to_pylist()[0]
    return cast(Sequence[Any], results)[0]


@dataclass(eq=False, slots=True)
class TableRows:
    """A batch handler's Arrow table (``pyarrow.Table`` or ``RecordBatch``) with the messages
    its rows belong to, one row per message, in order."""

    table: Any
    messages: list[Message]

    def __len__(self) -> int:
        return len(self.messages)
