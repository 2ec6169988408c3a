"""B3: the Confluent Parallel Consumer's published scenario, run the same way: 10,000 records
on 1 partition, 1,000 keys, each handled in a uniform random 0-5 ms, concurrency 100. Wall time
per ordering next to the published Java figures (2.06 s by key, 22.2 s by partition, 2.83 s
unordered); the ideal is 10,000 x 2.5 ms / 100 = 0.25 s (partition order: 25 s)."""

from __future__ import annotations

import random
import time

from bench.harness import Context, Table, backlog, time_kafleet
from kafleet import Record

PUBLISHED = {"key": 2.06, "partition": 22.2, "unordered": 2.83}


def random_wait(record: Record) -> None:
    time.sleep(random.uniform(0, 0.005))


def run(ctx: Context) -> Table:
    count = ctx.scale(10_000, 2_000)
    topic = backlog(ctx, 1, count, keys=1_000)
    table = Table(
        "b3",
        f"Parallel Consumer's scenario: {count:,} records, 1 partition, 1,000 "
        "keys, 0-5 ms each, concurrency 100",
        ["ordering", "kafleet s", "published s", "ideal s", "kafleet / published"],
    )
    for ordering in ("key", "partition", "unordered"):
        seconds = time_kafleet(ctx, topic, count, random_wait, ordering=ordering, concurrency=100)
        ideal = count * 0.0025 / (1 if ordering == "partition" else 100)
        published = PUBLISHED[ordering] * count / 10_000
        table.add(ordering, seconds, published, ideal, seconds / published)
    table.notes.append("published figures are the Java library's own README; lower is better")
    return table
