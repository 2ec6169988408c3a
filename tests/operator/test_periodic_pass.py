"""The periodic pass ends cleanly: cancelled (the operator leaving) while a cluster's read is
still out, it leaves no task behind that fails when the read comes back. kopf re-raises the
error of any task it finds at its exit, so such a task made a clean SIGTERM exit 1."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

import pytest

from kafleet_operator.reconcile import periodic
from tests.operator.test_standby import Readers

BODY = {"metadata": {"namespace": "ns", "name": "cg", "uid": "u"}, "spec": {}}


class Target:
    key = bootstrap = want = "a:9092"


class SlowReaders(Readers):
    """One cluster whose read returns only when the test lets it."""

    asked = threading.Event()  # type: ignore[assignment]
    answer = threading.Event()

    def get(self, target: Target) -> Any:  # type: ignore[override]
        class Reader:
            def read(self, wants: list[Any]) -> dict[str, Any]:
                SlowReaders.asked.set()
                SlowReaders.answer.wait(10)
                return {}

        return Reader()

    def __len__(self) -> int:
        return 1


def test_a_pass_cancelled_while_a_read_is_out_leaves_no_task_that_fails_when_it_returns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(periodic.readers, "Readers", SlowReaders)
    SlowReaders.asked.clear()
    SlowReaders.answer.clear()
    observed: list[str] = []

    async def leave_during_a_read() -> list[BaseException]:
        mine = asyncio.current_task()
        run = asyncio.ensure_future(
            periodic.run(
                {"all": [BODY]},
                lambda body, memo: observed.append(body["metadata"]["name"]),
                lambda body, memo: Target(),
                interval_s=0.05,
            )
        )
        while not SlowReaders.asked.is_set():
            await asyncio.sleep(0.01)
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run
        SlowReaders.answer.set()  # the read comes back after the pass has closed
        left = [task for task in asyncio.all_tasks() if task is not mine]
        await asyncio.wait(left, timeout=5) if left else None
        return [
            error
            for task in left
            if task.done() and not task.cancelled() and (error := task.exception()) is not None
        ]

    assert asyncio.run(leave_during_a_read()) == []
    assert observed == []  # nothing is observed after the pass has ended
