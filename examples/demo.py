"""The demo's main job: slow order events billed in parallel by kafleet, nothing lost.

Produces ``--count`` order events for a handful of customers to the topic ``kafleet-demo-orders``,
then bills them with ``examples/orders.py`` (20 ms each) through a ``ParallelConsumer`` ordered
by key (each customer's orders in order, customers side by side), and prints what it did:
records billed, time taken against the one-at-a-time loop, commits, and the offsets committed.

    python examples/demo.py --bootstrap-servers 127.0.0.1:9092 [--count 300]
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from orders import bill

from kafleet import ParallelConsumer, Record, load_config

TOPIC = "kafleet-demo-orders"
CUSTOMERS = ["ada", "grace", "linus", "margaret", "barbara", "ken", "dennis", "radia"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--count", type=int, default=300)
    args = parser.parse_args()

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

    def handle(record: Record) -> None:
        result = bill(record)
        if str(result["order"]).startswith(run):
            with lock:
                billed.append(result)

    config = load_config(
        None,
        {
            "bootstrap_servers": args.bootstrap_servers,
            "group_id": "kafleet-demo-billing",
            "topics": [TOPIC],
            "ordering": "key",
            "concurrency": 32,
            "auto_offset_reset": "earliest",
        },
    )
    # The group remembers where it was: each run bills what earlier runs left and its own.
    started = time.monotonic()
    with ParallelConsumer(config, handle) as consumer:
        deadline = started + 120
        while len(billed) < args.count and time.monotonic() < deadline:
            time.sleep(0.1)
        took = time.monotonic() - started
    snapshot = consumer.snapshot()  # after the close, which commits what was done
    print(
        f"billed {len(billed)} of {args.count} orders in {took:.1f} s with kafleet "
        f"(one at a time, 20 ms each, would take {args.count * 0.02:.1f} s)"
    )
    per_customer: dict[str, float] = {}
    for result in billed:
        customer = str(result["customer"])
        per_customer[customer] = per_customer.get(customer, 0.0) + float(str(result["billed"]))
    for customer, total in sorted(per_customer.items()):
        print(f"  {customer:<9} {total:>10.2f}")
    print(
        f"commits: {snapshot['commits']}, rebalances: {snapshot['rebalances']}, "
        f"healthy: {snapshot['healthy']}"
    )
    return 0 if len(billed) == args.count else 1


if __name__ == "__main__":
    sys.exit(main())
