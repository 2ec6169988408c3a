"""The handlers' pool of a share-mode worker: ``concurrency`` records in handlers at once.

Owns: running ``process(record)`` calls handed in by every member: plain functions on a pool
of threads whose size follows ``concurrency`` live (threads beyond a lowered limit end after
their current record), coroutines on one event loop bounded by a semaphore of the same size;
stopping them. Records are taken in the order they are handed in, unordered across members.

Does not own what a call does (``share_consumer.py``) or acknowledging (``member.py``).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger(__name__)
Call = Callable[[], Any]


class ThreadPool:
    """Threads taking calls from one queue; as many as the concurrency asks."""

    def __init__(self, concurrency: int, name: str) -> None:
        self._calls: queue.SimpleQueue[Call | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._name = name
        self._wanted = 0
        self._running = 0
        self._threads: list[threading.Thread] = []
        self.resize(concurrency)

    def resize(self, concurrency: int) -> None:
        with self._lock:
            self._wanted = concurrency
            while self._running < concurrency:
                self._running += 1
                thread = threading.Thread(
                    target=self._work, name=f"{self._name}-{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                thread.start()
        for _ in range(max(0, self._running - concurrency)):
            self._calls.put(None)  # a thread that takes it ends, if still beyond the limit

    def submit(self, call: Call) -> None:
        self._calls.put(call)

    def _work(self) -> None:
        while True:
            call = self._calls.get()
            if call is None:
                with self._lock:
                    if self._running > self._wanted:
                        self._running -= 1
                        return
                continue
            try:
                call()
            except Exception:  # the call reports its own failures; this is a defect
                log.exception("a share handler call failed unexpectedly")

    def stop(self) -> None:
        with self._lock:
            self._wanted = 0
            count = self._running
        for _ in range(count):
            self._calls.put(None)


class CoroutinePool:
    """One event loop on its own thread; ``concurrency`` coroutines at once."""

    def __init__(self, concurrency: int, name: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._limit = concurrency
        self._running = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._waiting: deque[Callable[[], Awaitable[Any]]] = deque()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def resize(self, concurrency: int) -> None:
        self._loop.call_soon_threadsafe(self._set_limit, concurrency)

    def submit(self, call: Callable[[], Awaitable[Any]]) -> None:
        self._loop.call_soon_threadsafe(self._add, call)

    def _set_limit(self, concurrency: int) -> None:
        self._limit = concurrency
        self._start_waiting()

    def _add(self, call: Callable[[], Awaitable[Any]]) -> None:
        self._waiting.append(call)
        self._start_waiting()

    def _start_waiting(self) -> None:
        while self._waiting and self._running < self._limit:
            call = self._waiting.popleft()
            self._running += 1
            self._tasks.add(task := self._loop.create_task(self._run(call)))
            task.add_done_callback(self._tasks.discard)

    async def _run(self, call: Callable[[], Awaitable[Any]]) -> None:
        try:
            await call()
        except Exception:
            log.exception("a share handler coroutine failed unexpectedly")
        finally:
            self._running -= 1
            self._start_waiting()

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
