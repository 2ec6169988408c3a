"""Fixtures for the consumer's tests against the real broker: configs, running consumers that
are always closed, the handlers' journal, and librdkafka's in-process mock cluster."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from kafleet import Record
from tests.infra.mock_kafka import MockCluster
from tests.infra.records import record_number


@dataclass(frozen=True)
class Handled:
    worker: str
    partition: int
    offset: int
    key: bytes | None
    number: int
    started: float
    ended: float


@dataclass
class Journal:
    """A thread-safe log of every record a handler finished, for checking order and counts."""

    entries: list[Handled] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _active: Counter[object] = field(default_factory=Counter)
    overlaps: list[object] = field(default_factory=list)
    most_at_once: int = 0

    def handler(
        self,
        worker: str = "w",
        delay: Callable[[Record], float] = lambda r: 0.0,
        lane: Callable[[Record], object] = lambda r: None,
        then: Callable[[Record], float] = lambda r: 0.0,
    ) -> Callable[[Record], None]:
        """A handler that sleeps ``delay(record)``, then ``then(record)`` (asked after the
        first sleep), and notes any two records of one ``lane`` (partition or key) running at
        the same time."""

        def handle(record: Record) -> None:
            started = time.monotonic()
            name = lane(record)
            with self._lock:
                if name is not None and self._active[name]:
                    self.overlaps.append(name)
                self._active[name] += 1
                self.most_at_once = max(self.most_at_once, sum(self._active.values()))
            try:
                time.sleep(delay(record))
                time.sleep(then(record))
            finally:
                with self._lock:
                    self._active[name] -= 1
                    self.entries.append(
                        Handled(
                            worker,
                            record.partition,
                            record.offset,
                            record.key,
                            record_number(record.value or b""),
                            started,
                            time.monotonic(),
                        )
                    )

        return handle

    def numbers(self) -> Counter[int]:
        with self._lock:
            return Counter(e.number for e in self.entries)

    def count(self) -> int:
        with self._lock:
            return len(self.entries)

    def snapshot(self) -> list[Handled]:
        with self._lock:
            return list(self.entries)


@pytest.fixture
def journal() -> Journal:
    return Journal()


@pytest.fixture
def mock_kafka() -> Iterator[MockCluster]:
    """librdkafka's in-process mock cluster (tests/infra/mock_kafka.py): fast rebalances."""
    cluster = MockCluster()
    yield cluster
    cluster.close()
