"""B4: memory stays flat whatever the backlog. A kafleet worker process with a slow handler
(1 ms, 12 threads) consumes for a fixed time from a backlog of 100,000 and of 1,000,000
records; its peak resident memory should not grow with the backlog, because each partition's
queue is bounded and librdkafka's prefetch is tied to that bound."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from bench.harness import Context, Table, backlog

PARTITIONS = 12
SECONDS = 15.0

PROBE = """
import json, sys, time, uuid
from kafleet import ParallelConsumer, load_config
bootstrap, topic, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
config = load_config(None, {"bootstrap_servers": bootstrap, "topics": [topic],
                            "group_id": f"b4-{uuid.uuid4().hex}", "concurrency": 12})
consumer = ParallelConsumer(config, lambda record: time.sleep(0.001)).start()
time.sleep(seconds)
handled = consumer.stats.records_processed
consumer.close(grace_s=5)
# VmHWM, not getrusage's ru_maxrss: on Linux a child's ru_maxrss starts from its parent's
# high-water mark at fork, which here is the benchmark that just produced the backlog.
status = open("/proc/self/status").read()
peak_kib = int(status.split("VmHWM:")[1].split()[0])
print(json.dumps({"peak_rss_kib": peak_kib, "handled": handled}))
"""


def measure(ctx: Context, topic: str, seconds: float) -> dict[str, int]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, ctx.bootstrap, topic, str(seconds)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def run(ctx: Context) -> Table:
    seconds = ctx.scale(int(SECONDS), 5)
    table = Table(
        "b4",
        f"memory: a slow handler (1 ms, 12 threads) for {seconds} s, {PARTITIONS} partitions",
        ["backlog", "records handled", "peak RSS MiB", "/ smallest"],
    )
    results = []
    for size in (ctx.scale(100_000, 20_000), ctx.scale(1_000_000, 200_000)):
        topic = backlog(ctx, PARTITIONS, size)
        time.sleep(1)
        results.append((size, measure(ctx, topic, seconds)))
    smallest = results[0][1]["peak_rss_kib"]
    for size, result in results:
        table.add(
            f"{size:,} records",
            result["handled"],
            result["peak_rss_kib"] / 1024,
            result["peak_rss_kib"] / smallest,
        )
    return table
