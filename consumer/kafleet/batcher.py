"""Grouping handler results into batches per partition, for a sink such as the Spark job.

Owns: the open batch of each partition and the rules that close it: ``max_records`` results,
``max_bytes`` of them, or ``linger_s`` since its first result, whichever comes first. Pure
bookkeeping with the time passed in: no threads, no I/O, so every rule is tested exhaustively.
A result larger than ``max_bytes`` by itself makes a batch of one rather than being refused.

Does not own writing a batch, retrying a failed write, or committing (the sink does; a batch's
offsets are committed only once it is written). Not wired into the consumer yet: the Spark
sink that uses it arrives with exactly-once shipping.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kafleet.record import Record

TP = tuple[str, int]


@dataclass(frozen=True)
class BatchBounds:
    max_records: int = 10_000
    max_bytes: int = 16 * 1024 * 1024
    linger_s: float = 1.0

    def __post_init__(self) -> None:
        if self.max_records < 1 or self.max_bytes < 1 or self.linger_s < 0:
            raise ValueError(f"batch bounds must be positive: {self}")


@dataclass
class Batch:
    """Consecutive results of one partition, in the order they were added."""

    topic: str
    partition: int
    opened_at: float
    records: list[Record] = field(default_factory=list)
    results: list[Any] = field(default_factory=list)
    size: int = 0

    @property
    def first_offset(self) -> int:
        return min(r.offset for r in self.records)

    @property
    def last_offset(self) -> int:
        return max(r.offset for r in self.records)

    def __len__(self) -> int:
        return len(self.records)


class Batcher:
    def __init__(self, bounds: BatchBounds) -> None:
        self.bounds = bounds
        self._open: dict[TP, Batch] = {}

    def add(self, record: Record, result: Any, size: int, now: float) -> list[Batch]:
        """Add one result; return the batches this closed (none, or one, or two when a result
        does not fit the open batch and fills a new one by itself)."""
        closed: list[Batch] = []
        batch = self._open.get(record.tp)
        if batch is not None and batch.size + size > self.bounds.max_bytes:
            closed.append(self._close(record.tp))
            batch = None
        if batch is None:
            batch = self._open[record.tp] = Batch(record.topic, record.partition, now)
        batch.records.append(record)
        batch.results.append(result)
        batch.size += size
        if len(batch) >= self.bounds.max_records or batch.size >= self.bounds.max_bytes:
            closed.append(self._close(record.tp))
        return closed

    def due(self, now: float) -> list[Batch]:
        """Close and return every batch that has lingered ``linger_s`` or longer."""
        late = [tp for tp, b in self._open.items() if now - b.opened_at >= self.bounds.linger_s]
        return [self._close(tp) for tp in late]

    def flush(self, tps: list[TP] | None = None) -> list[Batch]:
        """Close the open batches of these partitions (all if None): a revoke or a shutdown."""
        chosen = list(self._open) if tps is None else [tp for tp in tps if tp in self._open]
        return [self._close(tp) for tp in chosen]

    def next_deadline(self) -> float | None:
        """When the oldest open batch will be due, if any is open."""
        if not self._open:
            return None
        return min(b.opened_at for b in self._open.values()) + self.bounds.linger_s

    def _close(self, tp: TP) -> Batch:
        return self._open.pop(tp)
