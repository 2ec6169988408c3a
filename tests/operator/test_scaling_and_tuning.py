"""The operator scales from real lag and tunes from real sidecars: a backlog on a real topic
raises replicas (never above the partition count), a real worker draining it lowers them only
after the stabilization window, and slow handlers reported by a sidecar lower
max_poll_records in the ConfigMap while no pod restarts."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, K8s, TopicFactory
from tests.infra.ports import free_port
from tests.infra.records import ProduceReport
from tests.infra.waiting import wait_until
from tests.operator.conftest import Operator, apply, consumer_group, get, wait_condition


def replicas(k8s: K8s, namespace: str, name: str) -> int:
    """The Deployment's replicas (0 before the operator made it)."""
    text = k8s.kubectl(
        "get", "-n", namespace, "deployment", name, "--ignore-not-found", "-o", "json"
    )
    return int(json.loads(text)["spec"]["replicas"]) if text.strip() else 0


def events(k8s: K8s, namespace: str, name: str) -> list[dict[str, str]]:
    listed = json.loads(
        k8s.kubectl(
            "get",
            "events",
            "-n",
            namespace,
            "--field-selector",
            f"involvedObject.name={name}",
            "-o",
            "json",
        )
    )
    return [{"reason": e["reason"], "message": e["message"]} for e in listed["items"]]


def test_a_backlog_raises_replicas_to_the_partitions_and_draining_lowers_them_after_the_window(
    k8s: K8s,
    namespace: str,
    kafka: str,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    operator: Callable[..., Operator],
    worker: Callable[..., subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    topic = topic_factory(partitions=3)
    produce(topic, 3_000)
    operator()
    manifest = consumer_group(
        "scaler",
        kafka,
        topic,
        autoscaling={
            "min_replicas": 1,
            "max_replicas": 10,
            "lag_per_replica": 100,  # 3,000 records ask for 30: the 3 partitions cap it
            "scale_down_stabilization_s": 15,
        },
    )
    apply(k8s, namespace, manifest)

    wait_until(lambda: replicas(k8s, namespace, "scaler") == 3, 60, "3 replicas", every=0.5)
    wait_until(  # the status is patched after the scale, a moment later on a busy machine
        lambda: "lag" in get(k8s, namespace, "kcg", "scaler").get("status", {}),
        30,
        "the lag in the status",
        every=0.5,
    )
    status = get(k8s, namespace, "kcg", "scaler")["status"]
    assert status["lag"] == 3_000
    assert status["lastScaleReason"] == "ScaledUpForLag"
    wait_until(  # Events are posted in the background, after the status
        lambda: any(e["reason"] == "ScaledUpForLag" for e in events(k8s, namespace, "scaler")),
        30,
        "the ScaledUpForLag event",
        every=0.5,
    )
    time.sleep(3)
    assert replicas(k8s, namespace, "scaler") == 3  # never above the partitions
    print(k8s.kubectl("get", "kcg", "-n", namespace, "-o", "wide"))  # shown with pytest -s
    print(yaml.safe_dump(get(k8s, namespace, "kcg", "scaler")["status"], sort_keys=False))

    worker(topic, manifest["spec"]["group_id"], tmp_path / "done.txt")  # drains it for real
    wait_until(
        lambda: get(k8s, namespace, "kcg", "scaler")["status"]["lag"] == 0,
        90,
        "the lag drained",
        every=0.5,
    )
    drained_at = time.monotonic()
    while time.monotonic() - drained_at < 10:  # inside the 15 s window: no scale down
        assert replicas(k8s, namespace, "scaler") == 3
        time.sleep(0.5)
    wait_until(lambda: replicas(k8s, namespace, "scaler") == 1, 30, "1 replica", every=0.5)

    assert time.monotonic() - drained_at >= 12  # the window, less the observation lag
    status = get(k8s, namespace, "kcg", "scaler")["status"]
    assert status["lastScaleReason"] == "ScaledDownAfterWindow"


class SlowWorker:
    """The state a worker whose handlers take 200 ms each, at concurrency 4, would write: its
    figures grow at 20 records a second, and it applies the ConfigMap's max_poll_records as a
    kubelet delivers it (read every half second once ``follow`` names the group)."""

    def __init__(self, k8s: K8s, state: Path) -> None:
        self.k8s, self.state = k8s, state
        self.started = time.monotonic()
        self.config: tuple[str, str] | None = None
        self.applied = 500
        self.stopped = threading.Event()
        self.write()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def follow(self, namespace: str, name: str) -> None:
        self.config = (namespace, f"{name}-worker")

    def write(self) -> None:
        records = int(20 * (time.monotonic() - self.started)) + 50
        state = {
            "written_at": time.time() + 3600,
            "group_id": "tuned",
            "concurrency": 4,
            "max_poll_records": self.applied,
            "uptime_seconds": time.monotonic() - self.started,
            "partitions": {},
            "handler_latency": {
                "buckets": [0.1, 0.25, 1.0],
                "counts": [0, records, 0, 0],
                "sum": records * 0.2,
            },
        }
        tmp = self.state.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(self.state)

    def _run(self) -> None:
        while not self.stopped.wait(0.5):
            if self.config is not None:
                namespace, name = self.config
                text = self.k8s.kubectl(
                    "get", "-n", namespace, "configmap", name, "--ignore-not-found", "-o", "json"
                )
                if text.strip():
                    worker = yaml.safe_load(json.loads(text)["data"]["worker.yaml"])
                    self.applied = int(worker["max_poll_records"])
            self.write()


@pytest.fixture
def slow_sidecar(k8s: K8s, tmp_path: Path) -> Iterator[tuple[str, SlowWorker]]:
    """A real ``kafleet sidecar`` serving the state of a ``SlowWorker`` (simulated: the worker
    pods are kwok's)."""
    state = tmp_path / "state.json"
    worker = SlowWorker(k8s, state)
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kafleet",
            "sidecar",
            "--state-file",
            str(state),
            "--port",
            str(port),
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: _answers(url), 30, "the sidecar")
    yield url, worker
    worker.stopped.set()
    proc.terminate()
    proc.wait(10)


def _answers(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url + "/status", timeout=1):
            return True
    except OSError:
        return False


def test_slow_handlers_lower_max_poll_records_in_the_config_map_while_no_pod_restarts(
    k8s: K8s,
    namespace: str,
    kafka: str,
    topic_factory: TopicFactory,
    operator: Callable[..., Operator],
    slow_sidecar: tuple[str, SlowWorker],
) -> None:
    topic = topic_factory(partitions=2)
    url, worker = slow_sidecar
    operator(sidecar_url=url)  # every pod's sidecar is this one
    worker.follow(namespace, "tuned")
    manifest = consumer_group(
        "tuned",
        kafka,
        topic,
        replicas=2,
        max_poll_records=500,
        drain_timeout_s=10,
        tuning={"enabled": True, "min_max_poll_records": 100},
    )
    apply(k8s, namespace, manifest)
    wait_condition(k8s, namespace, "tuned", "Ready", "True", timeout=90)
    uids = ("get", "pods", "-n", namespace, "-o", "jsonpath={.items[*].metadata.uid}")
    pods = k8s.kubectl(*uids)
    generation = get(k8s, namespace, "deployment", "tuned")["metadata"]["generation"]

    # At 200 ms over 4 handlers, a 50 ms poll interval needs 1 record (2 with the margin):
    # down to the policy's floor, a halving at a time, each once the pods applied the last.
    wait_until(
        lambda: get(k8s, namespace, "kcg", "tuned")["status"].get("maxPollRecords") == 100,
        60,
        "max_poll_records tuned down to 100",
        every=0.5,
    )

    config = yaml.safe_load(get(k8s, namespace, "configmap", "tuned-worker")["data"]["worker.yaml"])
    assert config["max_poll_records"] == 100

    def steps() -> set[str]:
        return {
            e["message"].split(":")[0]
            for e in events(k8s, namespace, "tuned")
            if e["reason"] == "LoweredForSlowHandlers"
        }

    expected = {
        "max_poll_records 500 -> 250",
        "max_poll_records 250 -> 125",
        "max_poll_records 125 -> 100",
    }
    # Events are posted in the background, after the status.
    wait_until(lambda: steps() >= expected, 30, "an Event for each step", every=0.5)
    assert steps() == expected
    assert (
        k8s.kubectl("get", "pods", "-n", namespace, "-o", "jsonpath={.items[*].metadata.uid}")
        == pods
    )
    assert get(k8s, namespace, "deployment", "tuned")["metadata"]["generation"] == generation
