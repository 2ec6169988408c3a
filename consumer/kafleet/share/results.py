"""A share poll's results written to the sink in one attempt: at-least-once, before the poll's
records are accepted.

Owns: turning each result into rows (a result that cannot be a row comes back with why, so
the member parks that record and the rest are written), the batches of a poll (one per
partition, in offset order, without a committed range: in a share group other members write
inside any range), one write of them all, and its timing in the stats. An outage raises; the
member retries within the records' locks. Does not own retrying or acknowledging
(``member.py``) or the sink (``spark/sink.py``).
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from kafleet.engine.record import Record
from kafleet.errors import ResultError
from kafleet.health.state import Stats
from kafleet.spark.batcher import Batch
from kafleet.spark.shipping import BatchWriter


def write_results(
    sink: BatchWriter, stats: Stats, pairs: list[tuple[Record, Any]]
) -> list[tuple[Record, Exception]]:
    """Write a poll's results in one attempt (an outage raises, and the member retries
    within the lock); the records whose results cannot be rows come back with why."""
    by_partition: dict[tuple[str, int], list[tuple[Record, list[Any]]]] = defaultdict(list)
    refused: list[tuple[Record, Exception]] = []
    for record, result in pairs:
        try:
            by_partition[record.tp].append((record, sink.rows(record, result)))
        except ResultError as exc:
            refused.append((record, exc))
    started = time.monotonic()
    try:
        batches = [_batch(tp, items) for tp, items in by_partition.items()]
        sink.write([sink.prepare(batch) for batch in batches])
    except Exception:
        stats.add(sink_write_failures=1)
        raise
    rows = sum(batch.row_count for batch in batches)
    stats.observe_write(time.monotonic() - started, len(pairs) - len(refused), rows)
    return refused


def _batch(tp: tuple[str, int], items: list[tuple[Record, list[Any]]]) -> Batch:
    items.sort(key=lambda pair: pair[0].offset)
    batch = Batch(tp[0], tp[1], None, items[-1][0].offset + 1)
    for record, rows in items:
        batch.records.append(record)
        batch.rows.append(rows)
        batch.size += record.size
    return batch
