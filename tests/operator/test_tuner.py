"""The tuner against the real API server, kwok's pods and a fake sidecar per pod that the test
serves (figures that grow as a real worker's do, and the max_poll_records the pod says it
applied, following the ConfigMap as a kubelet delivers it, or held back): a changed spec
value restarts the tuning, a tighter queue bound is obeyed even at zero replicas, a slowdown
after hours of fast records is seen at once, no step is taken before the pods applied the
last one, and a reconcile from an older status does not undo a tuning (one writer)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from kafleet.config.loading import load_config
from tests.conftest import K8s, TopicFactory
from tests.infra.ports import free_port
from tests.infra.waiting import wait_until
from tests.operator.conftest import Operator, apply, consumer_group, get


@dataclass
class Pod:
    """One fake worker's cumulative figures, advanced at ``rate`` records a second."""

    started: float = field(default_factory=time.monotonic)
    count: float = 0.0
    total_s: float = 0.0
    last: float = field(default_factory=time.monotonic)


class FakeSidecars:
    """Serves ``/<pod>/status`` as a sidecar does, for every pod of the group.

    ``latency_s`` and ``rate`` say how the handlers run from now on; ``history`` is what each
    pod had done before the test looked (records at ``history_latency_s``). ``applied`` is
    what the pods report as their max_poll_records: ``None`` follows the ConfigMap (polled
    every half second, as a kubelet delivers it), a number holds it there."""

    def __init__(self, k8s: K8s) -> None:
        self.k8s = k8s
        self.namespace, self.group = "", ""
        self.latency_s, self.rate, self.concurrency = 0.001, 0.0, 4
        self.history, self.history_latency_s = 0, 0.001
        self.applied: int | None = None
        self.delivered: int | None = None
        self.pods: dict[str, Pod] = {}
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.port = free_port()
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        self.threads = [
            threading.Thread(target=self.server.serve_forever, daemon=True),
            threading.Thread(target=self._deliver, daemon=True),
        ]
        for thread in self.threads:
            thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/{{pod}}"

    def watch(self, namespace: str, group: str) -> None:
        self.namespace, self.group = namespace, group

    def status(self, pod: str) -> dict[str, Any]:
        now = time.monotonic()
        with self.lock:
            p = self.pods.get(pod)
            if p is None:
                h = self.history
                p = self.pods[pod] = Pod(count=h, total_s=h * self.history_latency_s)
            done = self.rate * (now - p.last)
            p.count, p.total_s, p.last = p.count + done, p.total_s + done * self.latency_s, now
            applied = self.applied if self.applied is not None else self.delivered
            return {
                "healthy": True,
                "ready": True,
                "worker": {
                    "concurrency": self.concurrency,
                    "max_poll_records": applied,
                    "uptime_seconds": now - p.started,
                    "handler_latency": {
                        "buckets": [0.1, 1.0],
                        "counts": [0, int(p.count), 0],
                        "sum": p.total_s,
                    },
                },
            }

    def _deliver(self) -> None:
        while not self.stopped.wait(0.5):
            if not self.group:
                continue
            text = self.k8s.kubectl(
                "get", "-n", self.namespace, "configmap", f"{self.group}-worker",
                "--ignore-not-found", "-o", "json", check=False,
            )  # fmt: skip
            if text.strip():
                worker = yaml.safe_load(json.loads(text)["data"]["worker.yaml"])
                self.delivered = int(worker["max_poll_records"])

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        sidecars = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                pod, _, rest = self.path.strip("/").partition("/")
                if rest != "status":
                    self.send_error(404)
                    return
                body = json.dumps(sidecars.status(pod)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        return Handler

    def close(self) -> None:
        self.stopped.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def sidecars(k8s: K8s) -> Iterator[FakeSidecars]:
    fake = FakeSidecars(k8s)
    yield fake
    fake.close()


@pytest.fixture
def tuned_group(
    k8s: K8s,
    namespace: str,
    kafka: str,
    topic_factory: TopicFactory,
    operator: Callable[..., Operator],
    sidecars: FakeSidecars,
) -> Callable[..., None]:
    """``tuned_group(**spec)``: the operator (asking the fake sidecars) and a ConsumerGroup
    ``tuned`` with tuning on, its ConfigMap written."""
    topic = topic_factory(partitions=2)
    operator(sidecar_url=sidecars.url)
    sidecars.watch(namespace, "tuned")

    def make(**spec: Any) -> None:
        spec.setdefault("tuning", {"enabled": True})
        apply(k8s, namespace, consumer_group("tuned", kafka, topic, **spec))
        wait_until(lambda: config_value(k8s, namespace) is not None, 60, "the ConfigMap")

    return make


def config_value(k8s: K8s, namespace: str) -> int | None:
    text = k8s.kubectl(
        "get", "-n", namespace, "configmap", "tuned-worker", "--ignore-not-found", "-o", "json"
    )
    if not text.strip():
        return None
    return int(yaml.safe_load(json.loads(text)["data"]["worker.yaml"])["max_poll_records"])


def status(k8s: K8s, namespace: str) -> dict[str, Any]:
    return dict(get(k8s, namespace, "kcg", "tuned").get("status") or {})


def edit(k8s: K8s, namespace: str, spec: dict[str, Any]) -> None:
    k8s.kubectl(
        "patch", "-n", namespace, "kcg", "tuned", "--type=merge", "-p", json.dumps({"spec": spec})
    )


def wait_value(k8s: K8s, namespace: str, value: int, timeout: float = 60) -> None:
    wait_until(
        lambda: config_value(k8s, namespace) == value,
        timeout,
        f"max_poll_records {value} in the ConfigMap",
        every=0.5,
    )


def test_a_changed_spec_max_poll_records_restarts_the_tuning_from_it(
    k8s: K8s, namespace: str, tuned_group: Callable[..., None], sidecars: FakeSidecars
) -> None:
    tuned_group(max_poll_records=500, replicas=2)  # no records handled: nothing to tune from
    wait_until(lambda: status(k8s, namespace).get("maxPollRecords") == 500, 30, "status 500")

    edit(k8s, namespace, {"max_poll_records": 200})

    wait_value(k8s, namespace, 200, 30)
    wait_until(
        lambda: (
            status(k8s, namespace).get("maxPollRecords") == 200
            and (status(k8s, namespace).get("tuning") or {}).get("from") == 200
        ),
        30,
        "the status saying 200, tuned from 200",
        every=0.5,
    )


def test_a_tighter_queue_bound_clamps_a_tuned_value_even_at_zero_replicas(
    k8s: K8s,
    namespace: str,
    tuned_group: Callable[..., None],
    sidecars: FakeSidecars,
    tmp_path: Path,
) -> None:
    sidecars.latency_s, sidecars.rate = 0.0001, 200.0  # fast handlers: raise to the policy's max
    tuned_group(
        max_poll_records=500,
        replicas=2,
        tuning={"enabled": True, "max_max_poll_records": 2000},
    )
    wait_value(k8s, namespace, 2000)

    edit(k8s, namespace, {"replicas": 0})  # no pod, no figures: the tuner cannot step
    wait_until(
        lambda: not k8s.kubectl("get", "pods", "-n", namespace, "-o", "name"),
        60,
        "no pods",
        every=0.5,
    )
    edit(k8s, namespace, {"queue": {"max_records": 1000}})

    wait_value(k8s, namespace, 1000, 30)
    worker_yaml = get(k8s, namespace, "configmap", "tuned-worker")["data"]["worker.yaml"]
    (tmp_path / "worker.yaml").write_text(worker_yaml)
    assert load_config(tmp_path / "worker.yaml").max_poll_records == 1000  # a pod would start


def test_a_slowdown_after_hours_of_fast_records_lowers_max_poll_records_at_once(
    k8s: K8s, namespace: str, tuned_group: Callable[..., None], sidecars: FakeSidecars
) -> None:
    # Each pod handled a million records at 1 ms; now each takes 200 ms, 20 a second.
    sidecars.history, sidecars.history_latency_s = 1_000_000, 0.001
    sidecars.latency_s, sidecars.rate = 0.2, 20.0
    tuned_group(
        max_poll_records=500,
        replicas=2,
        tuning={"enabled": True, "max_max_poll_records": 500},
    )

    # Since the pods started, the mean is 1.004 ms: the fast handlers' value. The last
    # second's is 200 ms: 4 handlers finish one record per 50 ms poll.
    wait_value(k8s, namespace, 250, 30)
    assert status(k8s, namespace)["tuning"]["latencySeconds"] == pytest.approx(0.2, rel=0.05)


def test_no_step_is_taken_until_the_pods_applied_the_last_one(
    k8s: K8s, namespace: str, tuned_group: Callable[..., None], sidecars: FakeSidecars
) -> None:
    sidecars.latency_s, sidecars.rate = 0.2, 20.0
    sidecars.applied = 500  # the kubelet has not delivered the change yet
    tuned_group(max_poll_records=500, replicas=2)
    wait_value(k8s, namespace, 250)

    time.sleep(6)  # six passes
    assert config_value(k8s, namespace) == 250
    tuning = status(k8s, namespace)["tuning"]
    assert (tuning["pending"], tuning["appliedMin"], tuning["appliedMax"]) == (True, 500, 500)

    sidecars.applied = 250  # delivered and applied
    wait_value(k8s, namespace, 125, 30)
    wait_until(
        lambda: status(k8s, namespace)["tuning"]["appliedMax"] == 250,
        30,
        "the status saying the pods applied 250",
        every=0.5,
    )


def test_a_reconcile_from_an_older_status_does_not_undo_the_tuning(
    k8s: K8s, namespace: str, tuned_group: Callable[..., None], sidecars: FakeSidecars
) -> None:
    sidecars.latency_s, sidecars.rate = 0.2, 20.0  # slow: down to the policy's floor of 250
    tuned_group(
        max_poll_records=500,
        replicas=2,
        tuning={"enabled": True, "min_max_poll_records": 250},
    )
    wait_value(k8s, namespace, 250)
    wait_until(lambda: status(k8s, namespace).get("maxPollRecords") == 250, 30, "status 250")

    # An older copy of the status, as a reconcile may hold one; then an edit reconciles.
    k8s.kubectl(
        "patch", "-n", namespace, "kcg", "tuned", "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"maxPollRecords": 500}}),
    )  # fmt: skip
    edit(k8s, namespace, {"commit_interval_ms": 2000})
    seen = set()
    deadline = time.monotonic() + 5  # the reconcile and a few passes
    while time.monotonic() < deadline:
        seen.add(config_value(k8s, namespace))
        time.sleep(0.1)

    assert (
        "commit_interval_ms: 2000"
        in get(k8s, namespace, "configmap", "tuned-worker")["data"]["worker.yaml"]
    )
    assert seen == {250}  # the workers never saw the older copy's 500
    assert status(k8s, namespace)["maxPollRecords"] == 250  # the status says what it holds
