"""B2: slow I/O. Each record waits 5 ms (a network call); 16 partitions, 10,000 keys. The
poll-then-process loop handles one record at a time (ideal 200/s); kafleet by partition with
16 threads (ideal 3,200/s) and by key with 64 and 256 (ideal 12,800/s and 51,200/s). Each
rate is shown with its share of its own ideal, concurrency / 5 ms."""

from __future__ import annotations

import time
from typing import Any

from bench.harness import Context, Table, backlog, time_kafleet, time_poll_then_process

PARTITIONS = 16
WAIT_S = 0.005


def io_wait(record: Any) -> None:
    time.sleep(WAIT_S)


def run(ctx: Context) -> Table:
    table = Table(
        "b2",
        f"slow I/O: {WAIT_S * 1000:g} ms per record, {PARTITIONS} partitions, 10,000 keys",
        ["consumer", "records", "seconds", "records/s", "ideal/s", "of ideal", "x loop"],
    )
    loop_n = ctx.scale(1_000, 200)
    topic = backlog(ctx, PARTITIONS, loop_n)
    loop_s = time_poll_then_process(ctx, topic, loop_n, io_wait)
    loop_rate = loop_n / loop_s
    table.add(
        "poll-then-process loop", loop_n, loop_s, loop_rate, 1 / WAIT_S, loop_rate * WAIT_S, 1.0
    )
    for ordering, concurrency in (("partition", 16), ("key", 64), ("key", 256)):
        ideal = concurrency / WAIT_S
        count = ctx.scale(int(min(ideal * 4, 100_000)), 2_000)
        topic = backlog(ctx, PARTITIONS, count)
        seconds = time_kafleet(
            ctx, topic, count, io_wait, ordering=ordering, concurrency=concurrency
        )
        rate = count / seconds
        table.add(
            f"kafleet, ordering={ordering}, concurrency {concurrency}",
            count,
            seconds,
            rate,
            ideal,
            rate / ideal,
            rate / loop_rate,
        )
    return table
