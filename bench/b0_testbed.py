"""B0: what the test bed itself can do, the ceiling every later benchmark is read against.

Produces records of ~100 bytes to 12 partitions with the test bed's producer, then reads them
back with the plain confluent-kafka ``consume()`` loop (no processing). B1 compares kafleet's
overhead with this same raw loop.
"""

from __future__ import annotations

import uuid

from confluent_kafka.admin import AdminClient, NewTopic

from bench.harness import Context, Table, time_poll_then_process
from tests.infra.records import produce_numbered

PARTITIONS = 12


def run(ctx: Context) -> Table:
    count = ctx.scale(1_000_000, 50_000)
    topic = f"b0-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": ctx.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS)])[topic].result(timeout=30)

    produced = produce_numbered(ctx.bootstrap, topic, count, keys=10_000, value_size=100)
    consumed_s = time_poll_then_process(ctx, topic, count)

    table = Table(
        "b0",
        f"test bed ceiling: {count:,} records of 100 B on {PARTITIONS} partitions",
        ["what", "records", "seconds", "records/s"],
    )
    table.add("produce (idempotent, lz4, acks=all)", count, produced.seconds, produced.rate)
    table.add("raw consume() loop, no processing", count, consumed_s, count / consumed_s)
    table.notes.append(
        "the consume rate is the ideal that B1's kafleet / raw ratio is read against"
    )
    return table
