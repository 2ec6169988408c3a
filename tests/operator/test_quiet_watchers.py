"""kopf logs every successful run of every handler at INFO; the event handlers that run on
every status write of a group and every event of its objects would fill the operator's log
with a dozen lines a minute per idle group (review of issue 21). Only those lines go."""

from __future__ import annotations

import logging

import pytest

from kafleet_operator.handlers import QuietWatchers


def record(message: str) -> logging.LogRecord:
    return logging.LogRecord("kopf.objects", logging.INFO, __file__, 1, message, None, None)


@pytest.mark.parametrize("handler", ["remember", "pause_changed", "put_back"])
def test_the_watchers_successes_are_left_out(handler: str) -> None:
    assert not QuietWatchers().filter(record(f"Handler '{handler}' succeeded."))


@pytest.mark.parametrize(
    "message",
    [
        "Handler 'reconcile' succeeded.",
        "Handler 'put_back' failed with an exception and will stop now: boom",
        "Creation is processed: 1 succeeded; 0 failed.",
    ],
)
def test_everything_else_is_kept(message: str) -> None:
    assert QuietWatchers().filter(record(message))
