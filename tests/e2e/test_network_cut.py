"""A worker cut off from the brokers on the real node (issue 33, Kafka's failure matrix). Its pod's
traffic to and from the broker's address is dropped in the pod's own network namespace for twice
the session timeout, then let through again. Meanwhile the group's other worker takes all the
partitions and the group's committed offsets go on moving; the cut worker's sidecar says it is
not ready; after the cut it rejoins (or the kubelet restarts it) and both hold partitions again.
At the end the committed offsets are the log ends and every record has its receipt
(``examples/load.py``): nothing was lost, some were handled twice (at least once)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from tests.e2e import network_cut
from tests.e2e.conftest import EXTERNAL_KUBECONFIG, Release
from tests.e2e.fleet import (
    Cluster,
    LogFollower,
    apply,
    consumer_group,
    pods,
    restarts,
    wait_pods_ready,
    worker_status,
)
from tests.e2e.load import Trickle, produce, tally, topics, worker_env
from tests.infra.node import RealNode
from tests.infra.offsets import committed, log_ends
from tests.infra.waiting import wait_until

pytestmark = pytest.mark.timeout(900)

PARTITIONS = 4
SESSION_MS = 10_000
CUT_S = 2 * SESSION_MS / 1000  # how long the worker stays cut off, at least
# The cut worker's sidecar says so within the session timeout and a few readings of its state.
SAYS_SO_WITHIN_S = SESSION_MS / 1000 + 20
# Longer than the cut and the receipts' reconnection after it: a record whose receipt waits for
# the broker is not a hung handler, so the sidecar's verdict is the worker's own.
PROCESSING_TIMEOUT_S = 90


@pytest.fixture
def runc_root(fleet_cluster: Cluster, request: pytest.FixtureRequest) -> Path:
    """Where the real node's runc keeps its containers' state (a pod's namespace is found by it)."""
    if EXTERNAL_KUBECONFIG:
        pytest.fail(
            "a network cut enters a pod's namespace on this machine: it needs the test bed's "
            "real node, not the cluster KAFLEET_E2E_KUBECONFIG names",
            pytrace=False,
        )
    node: RealNode = request.getfixturevalue("real_node")
    return network_cut.runc_root(node.workdir)


@dataclass(frozen=True)
class Answer:
    """One reading of a pod's sidecar: ``/readyz``, ``/healthz`` (code, body) and the worker's
    assigned partitions from ``/status`` (None where a question got no answer)."""

    at: float  # monotonic
    ready: tuple[int, str] | None
    live: tuple[int, str] | None
    assigned: list[str] | None
    joined: bool | None  # the worker's own word: an assignment (maybe empty) came

    def failing(self) -> list[str]:
        """The verdicts that fail, each with its body (a busy server's 503 is no verdict)."""
        found = []
        for path, answer in (("/readyz", self.ready), ("/healthz", self.live)):
            if answer is not None and answer[0] == 503 and answer[1].startswith("failing"):
                found.append(f"{path}: {answer[1].strip()}")
        return found


class SidecarWatch:
    """A pod's sidecar, read every second from the host (as the kubelet's probes are)."""

    def __init__(self, pod: dict[str, Any]) -> None:
        self.answers: list[Answer] = []
        self._base = f"http://{pod['status']['podIP']}:8080"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _get(self, path: str) -> tuple[int, str] | None:
        try:
            with urllib.request.urlopen(self._base + path, timeout=3) as response:
                return response.status, response.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            body = exc.read().decode(errors="replace")
            return None if body.startswith("busy") else (exc.code, body)
        except OSError:
            return None

    def _run(self) -> None:
        while not self._stop.is_set():
            at = time.monotonic()
            ready, live, status = self._get("/readyz"), self._get("/healthz"), self._get("/status")
            worker: dict[str, Any] = {}
            if status is not None and status[0] == 200:
                worker = json.loads(status[1]).get("worker") or {}
            answer = Answer(at, ready, live, worker.get("assigned"), worker.get("joined"))
            self.answers.append(answer)
            self._stop.wait(1.0)

    def between(self, start: float, end: float) -> list[Answer]:
        return [a for a in self.answers if start <= a.at <= end]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def _group(cluster: Cluster, name: str, topic: str, receipts: str, pod_kafka: str) -> Any:
    return consumer_group(
        name,
        cluster.images.examples,
        pod_kafka,
        topic,
        handler="load:work",
        replicas=2,
        concurrency=4,
        # Dynamic membership: the broker drops a member it has not heard from for the session
        # timeout, and hands its partitions to the others.
        session_timeout_ms=SESSION_MS,
        processing_timeout_s=PROCESSING_TIMEOUT_S,
        shutdown_grace_s=5,
        drain_timeout_s=5,
        tuning={"enabled": False},
        pod_template={**cluster.placement, "worker": {"env": worker_env(pod_kafka, receipts)}},
    )


def _assigned(cluster: Cluster, ns: str, name: str) -> dict[str, list[str]]:
    """Each pod's assigned partitions as its sidecar says ({} for a pod that cannot say now)."""
    found = {}
    for pod in pods(cluster, ns, name):
        with contextlib.suppress(OSError, KeyError, ValueError):  # restarting, say
            found[pod["metadata"]["name"]] = list(worker_status(pod)["assigned"])
    return found


def _split_between(cluster: Cluster, ns: str, name: str, topic: str, pod_names: set[str]) -> bool:
    """Both pods hold 2 partitions each, and together all of them."""
    held = _assigned(cluster, ns, name)
    every = sorted(f"{topic}[{p}]" for p in range(PARTITIONS))
    return (
        set(held) == pod_names
        and sorted(len(a) for a in held.values()) == [2, 2]
        and sorted(p for a in held.values() for p in a) == every
    )


def test_a_worker_cut_off_from_the_brokers_loses_its_partitions_to_the_other_and_rejoins(
    fleet_cluster: Cluster,
    operator: Release,
    admin: AdminClient,
    kafka: str,
    pod_kafka: str,
    runc_root: Path,
    tmp_path: Path,
) -> None:
    started = time.monotonic()
    ns, name = operator.watched, "network-cut"
    topic, receipts = topics(admin, f"load-{name}-{time.time_ns()}", PARTITIONS)
    every = sorted(f"{topic}[{p}]" for p in range(PARTITIONS))
    produce(kafka, topic, PARTITIONS, 200)
    apply(fleet_cluster, ns, _group(fleet_cluster, name, topic, receipts, pod_kafka))
    wait_pods_ready(fleet_cluster, ns, name, 2)
    names = {p["metadata"]["name"] for p in pods(fleet_cluster, ns, name)}
    wait_until(
        lambda: _split_between(fleet_cluster, ns, name, topic, names),
        180,
        "both workers to own 2 partitions",
        every=1,
    )
    time.sleep(5)  # let a rebalance in progress end
    by_name = {p["metadata"]["name"]: p for p in pods(fleet_cluster, ns, name)}
    (cut_name, cut_pod), (other_name, other_pod) = sorted(by_name.items())
    trickle = Trickle(kafka, topic, PARTITIONS, per_s=10)
    watch = SidecarWatch(cut_pod)
    log = LogFollower(fleet_cluster, ns, cut_name, tmp_path)
    try:
        with network_cut.cut_off(runc_root, cut_pod, pod_kafka) as cut:
            assert cut.cut_at is not None
            wait_until(
                lambda: worker_status(other_pod)["assigned"] == every,
                120,
                f"{other_name} to take every partition while {cut_name} is cut off",
                every=1,
            )
            took_over = time.monotonic() - cut.cut_at
            at_takeover = committed(kafka, name, topic, PARTITIONS)
            wait_until(
                lambda: all(
                    o > at_takeover[p] for p, o in committed(kafka, name, topic, PARTITIONS).items()
                ),
                120,
                f"the group's committed offsets to move on every partition after {at_takeover}",
                every=1,
            )
            time.sleep(max(0.0, cut.cut_at + CUT_S - time.monotonic()))
            still = worker_status(other_pod)["assigned"]
            assert still == every, f"{other_name} let partitions go while the cut held: {still}"
            cut.restore()
        assert cut.restored_at is not None
        held_for = cut.restored_at - cut.cut_at
        wait_until(
            lambda: _split_between(fleet_cluster, ns, name, topic, names),
            240,
            f"{cut_name} to rejoin and both workers to own 2 partitions",
            every=1,
        )
        rejoined = time.monotonic() - cut.restored_at
        wait_pods_ready(fleet_cluster, ns, name, 2)
    finally:
        watch.stop()
        log.close()
        sent = trickle.stop()
    wait_until(
        lambda: committed(kafka, name, topic, PARTITIONS) == log_ends(kafka, topic, PARTITIONS),
        180,
        "the group's committed offsets to reach the log ends",
        every=2,
    )
    result = tally(kafka, topic, receipts, PARTITIONS)
    assert not result.lost, f"{len(result.lost)} records never handled: {result.lost[:10]}"
    after = {p["metadata"]["name"]: p for p in pods(fleet_cluster, ns, name)}
    assert set(after) == names, "a pod was replaced, not restarted in place or rejoined"
    cut_restarts = restarts(after[cut_name]).get("worker", 0)
    assert restarts(after[other_name]) == {"sidecar": 0, "worker": 0}, restarts(after[other_name])

    during = watch.between(cut.cut_at, cut.restored_at)
    said = [(a.at - cut.cut_at, a.failing()) for a in during if a.failing()]
    dropped = next((a.at - cut.cut_at for a in during if a.assigned == []), -1.0)
    figures = (
        f"{cut_name} cut off from {pod_kafka} for {held_for:.0f} s; its worker dropped its "
        f"partitions {dropped:.0f} s in; {other_name} held all {PARTITIONS} {took_over:.0f} s "
        f"in; both held 2 again {rejoined:.0f} s after the cut ended ({cut_restarts} worker "
        f"restarts); {sent} records written meanwhile, {result.duplicates} handled twice; "
        f"{time.monotonic() - started:.0f} s in all"
    )
    print(f"\nnetwork cut: {figures}")
    seen = sorted({(a.ready, a.live, a.joined) for a in during}, key=str)
    silent = (
        f"{cut_name}'s sidecar said nothing failed within {SAYS_SO_WITHIN_S:g} s of the cut; "
        f"its answers while cut (/readyz, /healthz, joined): {seen}; {figures}; its worker "
        f"logged: {[line for line in log.text().splitlines() if ' lost ' in line][:4]}"
    )
    assert said, silent
    assert said[0][0] <= SAYS_SO_WITHIN_S, f"{silent}; first failing {said[0][0]:.0f} s in"
    out = [a for a in during if a.joined is False and a.ready and "not in its group" in a.ready[1]]
    assert out, f"{silent}; /readyz never said the worker is not in its group"
    print(f"network cut: its sidecar failing {said[0][0]:.0f} s in: {said[0][1]}")
    fleet_cluster.kubectl("delete", "kcg", "-n", ns, name, "--wait=false")
