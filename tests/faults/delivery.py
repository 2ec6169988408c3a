"""Delivery judged from the outside, as Kafka's own consumer system tests judge it.

Owns: a producer that writes numbered records at a steady rate through a fault (idempotent,
``acks=all``: an acknowledged record is in the log exactly once) and remembers when each was
acknowledged; the receipts the handler under test wrote (``receipts.py``: partition, offset,
number and time, one line per handled record, flushed at once, so a killed worker's receipts
survive it); and what they add up to (``Delivery``): records lost, records handled twice, the
longest stall in handling, the rate in a window, and how long records waited.

Does not own the workers (``conftest.py``), the cluster or its faults
(``tests/infra/kafka_cluster.py``), nor what a test asserts.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import KafkaError, Message, Producer

from tests.infra.records import record_key, record_number, record_value


class SteadyProducer:
    """Numbered records to ``topic`` at ``rate`` a second from a thread of its own, until
    ``stop``; librdkafka retries each through leader moves for up to two minutes."""

    def __init__(self, bootstrap: str, topic: str, rate: float = 200.0, keys: int = 100) -> None:
        self.topic, self.rate, self.keys = topic, rate, keys
        self.acknowledged: dict[int, float] = {}  # number -> when acknowledged
        self.failures: list[str] = []
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 120_000,
                "log_level": 3,
            }
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="steady-producer", daemon=True)
        self.sent = 0

    def __enter__(self) -> SteadyProducer:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        if kind is None:
            self.stop()
        else:  # the block's own error says what went wrong: records it left unsent may not count
            self._stop.set()
            self._thread.join()
            self._producer.flush(10)

    def _delivered(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.failures.append(f"{msg.topic()}[{msg.partition()}]: {err}")
        else:
            self.acknowledged[record_number(msg.value() or b"")] = time.time()

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stop.is_set():
            due = int((time.monotonic() - started) * self.rate)
            while self.sent < due:
                try:
                    self._producer.produce(
                        self.topic,
                        key=record_key(self.sent, self.keys),
                        value=record_value(self.sent, 64),
                        on_delivery=self._delivered,
                    )
                except BufferError:
                    break
                self.sent += 1
            self._producer.poll(0.02)

    def stop(self, timeout: float = 150.0) -> None:
        """Stop producing and wait until every record sent is acknowledged or failed."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        left = self._producer.flush(timeout)
        assert left == 0, f"{left} records were never acknowledged within {timeout:.0f} s"
        assert not self.failures, f"{len(self.failures)} records failed: {self.failures[:3]}"


@dataclass(frozen=True)
class Receipt:
    partition: int
    offset: int
    number: int
    at: float


def read_receipts(folder: Path) -> list[Receipt]:
    """Every receipt the workers wrote into ``folder`` (``receipts-*.txt``), in time order."""
    found: list[Receipt] = []
    for path in sorted(folder.glob("receipts-*.txt")):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 4:  # a worker killed mid-write leaves a partial last line
                found.append(Receipt(int(parts[0]), int(parts[1]), int(parts[2]), float(parts[3])))
    return sorted(found, key=lambda r: r.at)


@dataclass
class Delivery:
    """What was acknowledged against what was handled."""

    acknowledged: dict[int, float]
    receipts: list[Receipt]
    handled: Counter[int] = field(init=False)

    def __post_init__(self) -> None:
        self.handled = Counter(r.number for r in self.receipts)
        self._offsets = Counter((r.partition, r.offset) for r in self.receipts)

    @property
    def lost(self) -> list[int]:
        return sorted(set(self.acknowledged) - set(self.handled))

    @property
    def duplicates(self) -> int:
        """Handlings beyond the first, summed over the records' offsets: the consumer's count.
        A record at two offsets is two records to it: an idempotent producer may still write
        one twice through leader moves (librdkafka#4953), which ``written_twice`` counts."""
        return sum(count - 1 for count in self._offsets.values() if count > 1)

    @property
    def written_twice(self) -> int:
        """Records the log holds at more than one offset (of those handled): the producer's."""
        offsets: dict[int, set[tuple[int, int]]] = {}
        for r in self.receipts:
            offsets.setdefault(r.number, set()).add((r.partition, r.offset))
        return sum(len(found) - 1 for found in offsets.values())

    def longest_stall(self, start: float, end: float) -> float:
        """The longest time within [start, end] in which no record was handled."""
        times = [start, *(r.at for r in self.receipts if start <= r.at <= end), end]
        return max(b - a for a, b in itertools.pairwise(times))

    def longest_quiet(self, start: float, end: float) -> float:
        """The longest time within [start, end] in which no record was acknowledged: how long
        the producer itself stalled (its stalls are not the consumer's)."""
        acks = sorted(at for at in self.acknowledged.values() if start <= at <= end)
        times = [start, *acks, end]
        return max(b - a for a, b in itertools.pairwise(times))

    def rate(self, start: float, end: float) -> float:
        """Records handled per second within [start, end] (first handlings only)."""
        seen: set[int] = set()
        count = 0
        for r in self.receipts:
            if r.number not in seen:
                seen.add(r.number)
                count += start <= r.at <= end
        return count / max(end - start, 1e-9)

    def waits(self, start: float, end: float) -> list[float]:
        """For each record acknowledged within [start, end], seconds from its acknowledgement
        to its first handling, sorted."""
        first: dict[int, float] = {}
        for r in self.receipts:
            first.setdefault(r.number, r.at)
        return sorted(
            max(0.0, first[n] - at)
            for n, at in self.acknowledged.items()
            if start <= at <= end and n in first
        )

    def settled_after(self, start: float, until: float | None = None, wait_s: float = 1.0) -> float:
        """Seconds from ``start`` until records acknowledged from then on (up to ``until``)
        wait ``wait_s`` or less for their handling again (the last that waited longer ends
        it); a record never handled waits for ever."""
        first: dict[int, float] = {}
        for r in self.receipts:
            first.setdefault(r.number, r.at)
        late = [
            at
            for n, at in self.acknowledged.items()
            if start <= at <= (until if until is not None else at)
            and first.get(n, float("inf")) - at > wait_s
        ]
        return max(late, default=start) - start

    def summary(self, start: float, end: float) -> str:
        waits = self.waits(start, end)
        p99 = waits[int(len(waits) * 0.99) - 1] if waits else 0.0
        return (
            f"acknowledged {len(self.acknowledged)}, lost {len(self.lost)}, handled twice "
            f"{self.duplicates} (written twice by the producer: {self.written_twice}), "
            f"longest stall {self.longest_stall(start, end):.1f} s "
            f"(acknowledgements: {self.longest_quiet(start, end):.1f} s), "
            f"rate {self.rate(start, end):.0f}/s, wait p99 {p99:.2f} s, "
            f"settled after {self.settled_after(start, end):.1f} s"
        )
