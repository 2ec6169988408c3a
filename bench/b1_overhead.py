"""B1: kafleet's overhead. 1,000,000 records of ~100 bytes on 12 partitions, a no-op handler:
kafleet (by partition and unordered, 12 threads; a handler of one record and a batch handler)
against the plain confluent-kafka consume() loop in the same run. The ratio kafleet / raw is
the price of the Poller, the queues, the Executor and the offset tracking when handlers cost
nothing; with real work it vanishes."""

from __future__ import annotations

from confluent_kafka import Message

from bench.harness import Context, Table, backlog, time_kafleet, time_poll_then_process
from kafleet import Record, batch_handler

PARTITIONS = 12


def noop(record: Record) -> None:
    return None


@batch_handler
def noop_batch(messages: list[Message]) -> None:
    return None


def run(ctx: Context) -> Table:
    count = ctx.scale(1_000_000, 100_000)
    topic = backlog(ctx, PARTITIONS, count)
    raw_s = time_poll_then_process(ctx, topic, count)
    table = Table(
        "b1",
        f"overhead: {count:,} records of 100 B, {PARTITIONS} partitions, no-op handler",
        ["consumer", "seconds", "records/s", "/ raw"],
    )
    table.add("raw consume() loop", raw_s, count / raw_s, 1.0)
    for handler, kind in ((noop, "record"), (noop_batch, "batch")):
        for ordering in ("partition", "unordered"):
            seconds = time_kafleet(ctx, topic, count, handler, ordering=ordering, concurrency=12)
            table.add(
                f"kafleet, {kind} handler, ordering={ordering}, 12 threads",
                seconds,
                count / seconds,
                raw_s / seconds,
            )
    return table
