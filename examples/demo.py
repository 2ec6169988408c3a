"""The demo's main job: slow order events billed in parallel by kafleet, shipped to Delta.

Produces ``--count`` order events for a handful of customers to the topic ``kafleet-demo-orders``,
then bills them with ``examples/orders.py`` (20 ms each) through a ``ParallelConsumer`` ordered
by key (each customer's orders in order, customers side by side). Each bill the handler returns
is shipped in batches to a Delta table through an in-process Spark, and offsets are committed
only once their batch is written. It prints what it did (records billed, time taken against
the one-at-a-time loop, batches written, commits) and ends by querying the table back through
Spark: this run's orders counted and summed per customer (the records' key).

    python examples/demo.py --bootstrap-servers 127.0.0.1:9092 --jars .cache/spark/delta-4.4.0
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession
from pyspark.sql import functions as fn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from orders import bill
from quiet import logs_to, show_tail

from kafleet import ParallelConsumer, Record, load_config

TOPIC = "kafleet-demo-orders"
CUSTOMERS = ["ada", "grace", "linus", "margaret", "barbara", "ken", "dennis", "radia"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--jars", required=True, help="Delta Lake's jars (make delta-jars)")
    parser.add_argument("--table", default=".cache/demo/billed", help="the Delta table")
    parser.add_argument(
        "--log", default=".cache/demo/demo.log", help="where Kafka's client, Spark and kafleet log"
    )
    args = parser.parse_args()
    with logs_to(Path(args.log).resolve()) as log:
        ok = run(args)
    print(f"the log of Kafka's client, Spark and kafleet: {log}")
    if not ok:
        show_tail(log)
    return 0 if ok else 1


def run(args: argparse.Namespace) -> bool:
    """The demo's story on standard output; True if every order was billed and read back."""
    table = str(Path(args.table).resolve())

    admin = AdminClient({"bootstrap.servers": args.bootstrap_servers})
    try:
        admin.create_topics([NewTopic(TOPIC, num_partitions=4)])[TOPIC].result(timeout=30)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
    run = uuid.uuid4().hex[:6]
    producer = Producer({"bootstrap.servers": args.bootstrap_servers})
    for i in range(args.count):
        customer = CUSTOMERS[i % len(CUSTOMERS)]
        event = {"order": f"{run}-{i}", "customer": customer, "amount": round(5 + 1.5 * i, 2)}
        producer.produce(TOPIC, key=customer, value=json.dumps(event))
    producer.flush(30)
    print(
        f"produced {args.count} order events to {TOPIC} (4 partitions, {len(CUSTOMERS)} customers)"
    )

    billed: list[dict[str, object]] = []
    lock = threading.Lock()

    def handle(record: Record) -> dict[str, object]:
        result = bill(record)
        if str(result["order"]).startswith(run):
            with lock:
                billed.append(result)
        return result  # a row for the Delta table, with the record's coordinates

    config = load_config(
        None,
        {
            "bootstrap_servers": args.bootstrap_servers,
            "group_id": "kafleet-demo-billing",
            "topics": [TOPIC],
            "ordering": "key",
            "concurrency": 32,
            "auto_offset_reset": "earliest",
            "spark": {
                "table": table,
                "master": "local[2]",
                "jars": [args.jars],
                "batch": {"linger_ms": 500},
                "conf": {"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"},
            },
        },
    )
    # The group remembers where it was: each run bills what earlier runs left and its own.
    print("starting Spark in this process and joining the group ...")
    consumer = ParallelConsumer(config, handle).start()
    started = time.monotonic()
    deadline = started + 120
    while len(billed) < args.count and time.monotonic() < deadline:
        time.sleep(0.1)
    took = time.monotonic() - started
    # writes the last batches, then commits them: a generous grace, as a Delta write on a busy
    # laptop can outlast the default 30 s, and a run that stops before it leaves rows unwritten
    consumer.close(grace_s=120)
    snapshot = consumer.snapshot()
    print(
        f"billed {len(billed)} of {args.count} orders in {took:.1f} s with kafleet "
        f"(one at a time, 20 ms each, would take {args.count * 0.02:.1f} s)"
    )
    print(
        f"batches written to Delta: {snapshot['sink_batches']} ({snapshot['sink_rows']} rows), "
        f"commits: {snapshot['commits']}, rebalances: {snapshot['rebalances']}, "
        f"healthy: {snapshot['healthy']}"
    )
    print(f"this run's orders in the Delta table {table}, per customer (the key), by Spark:")
    rows = (
        SparkSession.builder.getOrCreate()
        .read.format("delta")
        .load(table)
        .where(fn.col("order").startswith(run))
        .groupBy(fn.col("kafka_key").cast("string").alias("customer"))
        .agg(fn.count("*").alias("orders"), fn.sum("billed").alias("billed"))
        .orderBy("customer")
        .collect()
    )
    for row in rows:
        print(f"  {row['customer']:<9} {row['orders']:>4} orders {row['billed']:>10.2f}")
    in_table = sum(int(row["orders"]) for row in rows)
    print(f"rows of this run in the table: {in_table} of {args.count}")
    return len(billed) == args.count == in_table


if __name__ == "__main__":
    sys.exit(main())
