"""What the end-to-end tests do to a fleet: write orders, apply a ConsumerGroup, read pods, their
logs and their group's offsets. Plain helpers over ``kubectl`` and the broker; no fixtures."""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import yaml
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.infra import k8s, k8s_build
from tests.infra.kafka import TestbedError
from tests.infra.offsets import committed
from tests.infra.offsets import log_ends as end_offsets
from tests.infra.waiting import wait_until

BILLED = re.compile(r"billed order (\d+) of ")
BILLED_AT = re.compile(r"billed order \d+ of .*\(partition (\d+), offset (\d+)\)")


@dataclass(frozen=True)
class Images:
    """The image references the tests run (each already present on the node)."""

    kafleet: str
    spark: str
    examples: str
    examples_spark: str
    pull_policy: str


@dataclass
class Cluster:
    """A cluster whose pods really run: its kubeconfig, kubectl and helm, and what they run."""

    kubeconfig: Path
    images: Images
    placement: dict[str, Any]
    standing: Callable[[], str] = lambda: ""  # what stands in the way of pods on its nodes

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        try:
            return k8s.kubectl(self.kubeconfig, *args, input=input, check=check, timeout=180)
        except TestbedError as exc:
            raise AssertionError(str(exc)) from None

    def kubectl_stream(self, *args: str, stdout: IO[bytes] | None = None) -> subprocess.Popen[Any]:
        """A long-running kubectl (``logs -f``, ``--watch``): its output to ``stdout``, or a
        text pipe to read."""
        return subprocess.Popen(
            [str(k8s_build.BIN / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            stdout=stdout or subprocess.PIPE,
            stderr=subprocess.STDOUT if stdout else None,
            text=stdout is None,
        )

    def json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json"))

    def helm(self, *args: str) -> str:
        try:
            return k8s.helm(self.kubeconfig, *args)
        except TestbedError as exc:
            raise AssertionError(f"{exc}\n{self.standing()}") from None


def produce_orders(kafka: str, topic: str, first: int, count: int) -> set[int]:
    """Orders ``first .. first+count-1`` as examples/orders.py reads them, keyed by customer."""
    producer = Producer({"bootstrap.servers": kafka, "linger.ms": 5})
    for order in range(first, first + count):
        customer = f"customer-{order % 13}"
        value = {"order": order, "customer": customer, "amount": round(order * 1.25, 2)}
        producer.produce(topic, key=customer, value=json.dumps(value))
    left = producer.flush(30)
    assert left == 0, f"{left} orders were not acknowledged"
    return set(range(first, first + count))


def consumer_group(name: str, image: str, kafka: str, topic: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kafleet.io/v1alpha1",
        "kind": "ConsumerGroup",
        "metadata": {"name": name},
        "spec": {
            "image": image,
            "handler": "orders:bill",
            "bootstrap_servers": kafka,
            "group_id": name,
            "topics": [topic],
            "concurrency": 8,
            **spec,
        },
    }


def apply(cluster: Cluster, namespace: str, manifest: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest))


def pods(cluster: Cluster, namespace: str, group: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = cluster.json(
        "get", "pods", "-n", namespace, "-l", f"app.kubernetes.io/instance={group}"
    )["items"]
    return found


def wait_pods_ready(cluster: Cluster, namespace: str, group: str, count: int) -> list[str]:
    """Wait until ``count`` pods of the group are Ready (the kubelet's probes passed)."""

    def ready() -> bool:
        live = [
            p for p in pods(cluster, namespace, group) if not p["metadata"].get("deletionTimestamp")
        ]
        return len(live) == count and all(
            any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in p["status"].get("conditions", [])
            )
            for p in live
        )

    try:
        wait_until(ready, 240, f"{count} Ready pods of {group}", every=1)
    except AssertionError as exc:  # say where each pod stands
        found = _standing(pods(cluster, namespace, group))
        raise AssertionError(f"{exc}: {found}\n{cluster.standing()}") from None
    return sorted(p["metadata"]["name"] for p in pods(cluster, namespace, group))


def _standing(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each pod's phase, conditions that are not true and its containers' states."""
    return [
        {
            "pod": p["metadata"]["name"],
            "phase": p["status"].get("phase"),
            "conditions": [
                (c["type"], c.get("reason"), c.get("message"))
                for c in p["status"].get("conditions", [])
                if c["status"] != "True"
            ],
            "containers": {
                c["name"]: (c.get("restartCount"), c.get("state"), c.get("lastState"))
                for c in [
                    *p["status"].get("initContainerStatuses", []),
                    *p["status"].get("containerStatuses", []),
                ]
            },
        }
        for p in found
    ]


def logs(cluster: Cluster, namespace: str, pod: str, container: str = "worker") -> str:
    return cluster.kubectl("logs", "-n", namespace, pod, "-c", container, check=False)


def billed(text: str) -> list[int]:
    return [int(n) for n in BILLED.findall(text)]


def last_billed(texts: Iterable[str]) -> dict[int, int]:
    """The highest offset billed in each partition, from the workers' log lines."""
    last: dict[int, int] = {}
    for text in texts:
        for partition, offset in BILLED_AT.findall(text):
            last[int(partition)] = max(last.get(int(partition), -1), int(offset))
    return last


def orders_below(kafka: str, topic: str, offsets: dict[int, int]) -> set[int]:
    """The orders of each partition below its committed offset (what the group says is done)."""
    wanted = {p: o for p, o in offsets.items() if o > 0}
    consumer = Consumer(
        {"bootstrap.servers": kafka, "group.id": "e2e-reader", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in wanted])
    found: set[int] = set()
    seen = dict.fromkeys(wanted, 0)
    try:
        while any(seen[p] < o for p, o in wanted.items()):
            message = consumer.poll(10)
            assert message is not None, f"the topic ended before {wanted} (read {seen})"
            if message.error() or message.offset() >= wanted[message.partition()]:
                continue
            seen[message.partition()] = message.offset() + 1
            found.add(json.loads(message.value())["order"])
    finally:
        consumer.close()
    return found


class LogFollower:
    """``kubectl logs -f`` of one container into a file, so its lines outlive the pod."""

    def __init__(
        self, cluster: Cluster, namespace: str, pod: str, folder: Path, container: str = "worker"
    ) -> None:
        self.path = folder / f"{pod}.log"
        self._out = self.path.open("wb")
        self.proc = cluster.kubectl_stream(
            "logs", "-f", "-n", namespace, pod, "-c", container, stdout=self._out
        )

    def text(self) -> str:
        return self.path.read_text(errors="replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self._out.close()


class PodWatch:
    """Every state the group's pods pass through, from a watch started before a change, so that
    a container's exit code is read even though its pod is then deleted."""

    def __init__(self, cluster: Cluster, namespace: str, group: str) -> None:
        self.terminated: dict[tuple[str, str], dict[str, Any]] = {}
        self.deletion: dict[str, str] = {}
        self.grace: dict[str, int] = {}
        self.seen: set[str] = set()
        self.proc = cluster.kubectl_stream(
            *("get", "pods", "-n", namespace, "-l", f"app.kubernetes.io/instance={group}"),
            *("--watch", "--output-watch-events", "-o", "json"),
        )
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        decoder = json.JSONDecoder()
        buffer = ""
        for line in self.proc.stdout:
            buffer += line
            try:
                event, end = decoder.raw_decode(buffer.lstrip())
            except json.JSONDecodeError:
                continue
            buffer = buffer.lstrip()[end:]
            self._see(event["object"])

    def _see(self, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        self.seen.add(name)
        if pod["metadata"].get("deletionTimestamp"):
            self.deletion.setdefault(name, pod["metadata"]["deletionTimestamp"])
            self.grace[name] = pod["metadata"].get("deletionGracePeriodSeconds", 0)
        status_of = pod.get("status", {})
        for status in [
            *status_of.get("initContainerStatuses", []),
            *status_of.get("containerStatuses", []),
        ]:
            state = status.get("state", {}).get("terminated")
            if state:
                self.terminated[(name, status["name"])] = state

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def lag(kafka: str, group: str, topic: str, partitions: int) -> int:
    """The group's lag on the topic, from Kafka: log-end minus committed (0 when none)."""
    ends = end_offsets(kafka, topic, partitions)
    done = committed(kafka, group, topic, partitions)
    return sum(end - max(done.get(p, 0), 0) for p, end in ends.items())


def restarts(pod: dict[str, Any]) -> dict[str, int]:
    """Restarts of each container, the native sidecar's among the init containers'."""
    status = pod["status"]
    found = [*status.get("initContainerStatuses", []), *status.get("containerStatuses", [])]
    return {s["name"]: s["restartCount"] for s in found}


BUSY_ATTEMPTS = 5


def worker_status(pod: dict[str, Any]) -> dict[str, Any]:
    """The worker's state as its sidecar's ``/status`` serves it, read from the pod's IP (the
    host reaches the pods' bridge, as the kubelet's probes do)."""
    url = f"http://{pod['status']['podIP']}:8080/status"
    for attempt in range(BUSY_ATTEMPTS):
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                found: dict[str, Any] = json.loads(response.read())["worker"]
            return found
        except urllib.error.HTTPError as exc:
            # The sidecar serves two connections per address at once (http_serving.py) and
            # the kubelet's two probes come from this host's address too: busy, try again.
            if exc.code != 503 or attempt == BUSY_ATTEMPTS - 1:
                raise
            time.sleep(float(exc.headers.get("Retry-After", "1")))
    raise AssertionError("unreachable")
