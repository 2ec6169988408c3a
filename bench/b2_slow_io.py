"""B2: slow I/O. Each record waits 5 ms (a network call); 16 partitions, 10,000 keys. The
poll-then-process loop handles one record at a time (ideal 200/s); kafleet by partition with
16 threads (ideal 3,200/s) and by key with 64 and 256 (ideal 12,800/s and 51,200/s), the last
also with a coroutine handler (``asyncio.sleep``) on the event loop instead of 256 threads.
Each rate is shown with its share of its own ideal, concurrency / 5 ms; the last row, 256
coroutines that only sleep on a bare event loop (no Kafka, no kafleet), is what one Python
event loop reaches on this machine: the ceiling of the coroutine row."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from bench.harness import Context, Table, backlog, time_kafleet, time_poll_then_process

PARTITIONS = 16
WAIT_S = 0.005


def io_wait(record: Any) -> None:
    time.sleep(WAIT_S)


async def io_wait_async(record: Any) -> None:
    await asyncio.sleep(WAIT_S)


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
    rows: list[tuple[str, int, Callable[[Any], Any], str]] = [
        ("partition", 16, io_wait, ""),
        ("key", 64, io_wait, ""),
        ("key", 256, io_wait, ""),
        ("key", 256, io_wait_async, ", coroutine"),
    ]
    for ordering, concurrency, handler, kind in rows:
        ideal = concurrency / WAIT_S
        count = ctx.scale(int(min(ideal * 4, 100_000)), 2_000)
        topic = backlog(ctx, PARTITIONS, count)
        seconds = time_kafleet(
            ctx, topic, count, handler, ordering=ordering, concurrency=concurrency
        )
        rate = count / seconds
        table.add(
            f"kafleet, ordering={ordering}, concurrency {concurrency}{kind}",
            count,
            seconds,
            rate,
            ideal,
            rate / ideal,
            rate / loop_rate,
        )
    bare_s = 4.0
    bare_n = asyncio.run(_bare_loop(256, bare_s))
    table.add(
        "bare asyncio loop, 256 coroutines (no Kafka)",
        bare_n,
        bare_s,
        bare_n / bare_s,
        256 / WAIT_S,
        bare_n / bare_s * WAIT_S / 256,
        bare_n / bare_s / loop_rate,
    )
    return table


async def _bare_loop(coroutines: int, seconds: float) -> int:
    """How many 5 ms sleeps ``coroutines`` coroutines end in ``seconds`` on one event loop."""
    done = 0
    stop = time.monotonic() + seconds

    async def sleeper() -> None:
        nonlocal done
        while time.monotonic() < stop:
            await asyncio.sleep(WAIT_S)
            done += 1

    await asyncio.gather(*(sleeper() for _ in range(coroutines)))
    return done
