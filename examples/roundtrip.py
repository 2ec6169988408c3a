"""Round-trip a few records through Kafka: the first step of ``make demo``.

Creates the topic ``kafleet-demo`` if it is missing, produces a handful of keyed order events,
then reads back exactly the records this run wrote (it notes each partition's end offset before
producing) and prints them. Later versions of the demo run the same records through kafleet's
parallel consumer and into a Spark table.

    python examples/roundtrip.py --bootstrap-servers 127.0.0.1:9092 [--count 10] [--topic NAME]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))
from quiet import logs_to, show_tail

PARTITIONS = 3
LEADER_COMING_UP = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
}


def ensure_topic(admin: AdminClient, topic: str) -> None:
    futures = admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS)])
    try:
        futures[topic].result(timeout=30)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise


def wait_for_leaders(admin: AdminClient, topic: str, timeout: float = 30.0) -> list[int]:
    """A new topic's partitions answer only once each has a leader; wait for that."""
    deadline = time.monotonic() + timeout
    while True:
        meta = admin.list_topics(topic, timeout=10).topics[topic]
        parts = meta.partitions
        if meta.error is None and parts and all(p.leader >= 0 for p in parts.values()):
            return sorted(parts)
        if time.monotonic() > deadline:
            raise RuntimeError(f"{topic} has no leader for every partition after {timeout:g} s")
        time.sleep(0.2)


def end_offsets(
    consumer: Consumer, topic: str, partitions: list[int], timeout: float = 30.0
) -> dict[int, int]:
    """Each partition's end offset. A partition whose leader the metadata already names may
    still answer NOT_LEADER_FOR_PARTITION for a moment while its broker takes the lead: such
    an error (or any retriable one) is tried again until ``timeout``."""
    deadline = time.monotonic() + timeout
    ends = {}
    for p in partitions:
        while True:
            try:
                _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                break
            except KafkaException as exc:
                error = exc.args[0]
                transient = error.retriable() or error.code() in LEADER_COMING_UP
                if not transient or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        ends[p] = high
    return ends


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", default="kafleet-demo")
    parser.add_argument("--count", type=int, default=10)
    parser.add_argument(
        "--log", default=".cache/demo/roundtrip.log", help="where Kafka's client logs"
    )
    args = parser.parse_args()
    with logs_to(Path(args.log).resolve()) as log:
        code = run(args)
    if code:
        show_tail(log)
    return code


def run(args: argparse.Namespace) -> int:
    """The round trip's story on standard output, its errors on standard error; the exit code."""
    admin = AdminClient({"bootstrap.servers": args.bootstrap_servers})
    ensure_topic(admin, args.topic)
    partitions = wait_for_leaders(admin, args.topic)

    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap_servers,
            "group.id": "kafleet-demo-roundtrip",
            "enable.auto.commit": False,
        }
    )
    start = end_offsets(consumer, args.topic, partitions)

    producer = Producer({"bootstrap.servers": args.bootstrap_servers, "enable.idempotence": True})
    customers = ["ada", "grace", "linus", "margaret"]
    for i in range(args.count):
        customer = customers[i % len(customers)]
        event = {"order": i, "customer": customer, "amount": round(9.5 + 3.25 * i, 2)}
        producer.produce(args.topic, key=customer, value=json.dumps(event))
    if producer.flush(30):
        print("error: not every record was delivered within 30 s", file=sys.stderr)
        return 1
    print(f"produced {args.count} records to {args.topic} ({len(partitions)} partitions)")

    consumer.assign([TopicPartition(args.topic, p, start[p]) for p in partitions])
    deadline = time.monotonic() + 30
    got = 0
    while got < args.count and time.monotonic() < deadline:
        for msg in consumer.consume(num_messages=100, timeout=0.5):
            if msg.error() is not None:
                raise KafkaException(msg.error())
            got += 1
            key = (msg.key() or b"").decode()
            print(
                f"  partition {msg.partition()} offset {msg.offset():>4}  {key:<8} "
                f"{(msg.value() or b'').decode()}"
            )
    consumer.close()
    print(f"consumed {got} of {args.count} records back")
    return 0 if got == args.count else 1


if __name__ == "__main__":
    sys.exit(main())
