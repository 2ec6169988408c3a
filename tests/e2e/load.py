"""Load for the autopilot's end-to-end tests: records of a chosen cost for ``examples/load.py``,
the receipts its handlers write back, and the replicas a Deployment ran over time.

Owns: writing a backlog spread evenly over a topic's partitions, a steady trickle in a thread,
the tally of receipts (records lost: below the log end and never handled; handled twice), the
worker env that turns receipts on, and a sampler of a Deployment's replicas. No fixtures and no
assertions: the tests judge.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.e2e.fleet import end_offsets


def topics(admin: AdminClient, name: str, partitions: int) -> tuple[str, str]:
    """A topic of ``partitions`` and its receipts topic (one partition)."""
    receipts = f"{name}-receipts"
    made = admin.create_topics([NewTopic(name, partitions, 1), NewTopic(receipts, 1, 1)])
    for future in made.values():
        future.result(30)
    return name, receipts


def worker_env(pod_kafka: str, receipts: str, work_s: float = 0.05) -> list[dict[str, str]]:
    """The worker container's variables for ``load:work``: its default work and receipts."""
    return [
        {"name": "LOAD_WORK_S", "value": str(work_s)},
        {"name": "LOAD_RECEIPTS_BOOTSTRAP", "value": pod_kafka},
        {"name": "LOAD_RECEIPTS_TOPIC", "value": receipts},
    ]


def produce(
    kafka: str, topic: str, partitions: int, count: int, first: int = 0, **fields: Any
) -> None:
    """``count`` records, one partition after another (an even backlog), each a JSON object
    with its number and ``fields`` (``work_s``, ``once``)."""
    producer = Producer({"bootstrap.servers": kafka, "linger.ms": 5})
    for n in range(first, first + count):
        value = json.dumps({"order": n, **fields})
        producer.produce(topic, value=value, partition=n % partitions)
        if n % 1000 == 999:
            producer.poll(0)
    left = producer.flush(30)
    if left:
        raise AssertionError(f"{left} records were not acknowledged by the broker")


class Trickle:
    """A steady input of ``per_s`` records a second in a thread, until ``stop``."""

    def __init__(self, kafka: str, topic: str, partitions: int, per_s: float) -> None:
        self.sent = 0
        self._stop = threading.Event()
        self._args = (kafka, topic, partitions, per_s)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        kafka, topic, partitions, per_s = self._args
        producer = Producer({"bootstrap.servers": kafka, "linger.ms": 5})
        started = time.monotonic()
        while not self._stop.is_set():
            due = int((time.monotonic() - started) * per_s)
            while self.sent < due:
                value = json.dumps({"order": 10_000_000 + self.sent})
                producer.produce(topic, value=value, partition=self.sent % partitions)
                self.sent += 1
            producer.poll(0)
            self._stop.wait(0.05)
        producer.flush(30)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(60)
        return self.sent


@dataclass
class Tally:
    """Receipts against the topic's log: what was never handled, and what was handled twice."""

    expected: int
    lost: list[tuple[int, int]]
    duplicates: int
    pods: Counter[str] = field(default_factory=Counter)


def tally(kafka: str, topic: str, receipts: str, partitions: int) -> Tally:
    """Read every receipt and compare with the offsets below each partition's log end."""
    ends = end_offsets(kafka, topic, partitions)
    (receipts_end,) = end_offsets(kafka, receipts, 1).values()
    seen: Counter[tuple[int, int]] = Counter()
    pods: Counter[str] = Counter()
    consumer = Consumer(
        {"bootstrap.servers": kafka, "group.id": "e2e-receipts", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(receipts, 0, 0)])
    read = 0
    try:
        while read < receipts_end:
            message = consumer.poll(10)
            if message is None:
                raise AssertionError(f"the receipts ended at {read} of {receipts_end}")
            if message.error():
                continue
            read = message.offset() + 1
            receipt = json.loads(message.value())
            if receipt["topic"] == topic:
                seen[(receipt["partition"], receipt["offset"])] += 1
                pods[receipt["pod"]] += 1
    finally:
        consumer.close()
    wanted = {(p, o) for p, end in ends.items() for o in range(end)}
    return Tally(
        expected=len(wanted),
        lost=sorted(wanted - set(seen)),
        duplicates=sum(n - 1 for n in seen.values()),
        pods=pods,
    )


class Replicas:
    """The Deployment's wished (``spec.replicas``) and ready replicas, sampled every second."""

    def __init__(self, kubeconfig: Path, namespace: str, name: str) -> None:
        self.samples: list[tuple[float, int, int]] = []  # (monotonic, spec, ready)
        self._api = kubernetes.client.AppsV1Api(
            kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
        )
        self._where = (name, namespace)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                found = self._api.read_namespaced_deployment(*self._where, _request_timeout=5)
                spec = found.spec.replicas or 0
                ready = found.status.ready_replicas or 0
                self.samples.append((time.monotonic(), spec, ready))
            except Exception:  # noqa: BLE001 - not there yet, or a slow apiserver: sample on
                pass
            self._stop.wait(1.0)

    @property
    def wished(self) -> list[int]:
        """Each distinct ``spec.replicas`` in the order the Deployment went through them."""
        steps: list[int] = []
        for _, spec, _ in self.samples:
            if not steps or steps[-1] != spec:
                steps.append(spec)
        return steps

    def latest(self) -> tuple[int, int]:
        return self.samples[-1][1:] if self.samples else (0, 0)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._api.api_client.close()
