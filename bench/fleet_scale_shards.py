"""B9's kafleet operators in one configuration: one ``kafleet operator`` process (``--shards 0``,
no Leases) or S processes of ``--shards S``, each leading its share of the shards through Leases
in a namespace of the configuration's own.

Owns: starting them all at once (each with its identity, liveness and metrics ports and log),
whether every shard is led with no process over its share (``balanced``), how many groups are
settled after a restart (``settled``: so balanced, the groups passed at least once by the
process that leads their shard; the rule of which shard a group is in is the operator's own,
``policy/shards.py``), their passes so
far (``passes``), the shards each leads (``led``: its ``kafleet_operator_shards_led``), their
Lease writes over a window (``lease_writes``: a watch on their Lease namespace, so kwok's node
Leases stay out), and stopping them all at once (SIGTERM: a leader releases its Leases).

Does not own the groups, the order of a run (``b9_fleet_scale.py``) or the figures
(``fleet_scale_figures.py``).
"""

from __future__ import annotations

import math
import re
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import kubernetes
import urllib3

from bench.fleet_scale_figures import TICK_S, Measured
from kafleet_operator.policy import shards as shard_rule
from tests.infra import k8s, processes
from tests.infra import kafka as kafka_infra

KAFLEET = str(kafka_infra.REPO_ROOT / ".venv" / "bin" / "kafleet")
# Kafka's Java client (``make share-jars``, part of the test bed): the operator reads many
# groups' committed offsets a request with it, as with the chart's kafleet-spark image.
JAVA_CLIENT = kafka_infra.REPO_ROOT / ".cache" / "share-client" / "4.3.1"
SAMPLE = re.compile(r"^(\w+)(?:\{(.*)\})? (\S+)$", re.M)
LABEL = re.compile(r'(\w+)="([^"]*)"')
PASSES = "kafleet_operator_passes_total"


@dataclass(frozen=True)
class Process:
    index: int
    pid: int
    identity: str
    metrics: str  # host:port of its /metrics
    liveness: str
    log: Path


def scrape(address: str, family: str) -> list[tuple[dict[str, str], float]]:
    """The samples of one family (``name[]``: the operator formats nothing else)."""
    url = f"http://{address}/metrics?name[]={family}"
    with urllib.request.urlopen(url, timeout=30) as response:
        text = response.read().decode()
    return [
        (dict(LABEL.findall(labels)), float(value))
        for name, labels, value in SAMPLE.findall(text)
        if name == family
    ]


class Operators:
    """One configuration's operator processes, watching ``namespace``."""

    def __init__(
        self,
        plane: k8s.ControlPlane,
        api: kubernetes.client.ApiClient,
        namespace: str,
        shards: int,
        sidecar_url: str,
        lease_namespace: str = "",
    ) -> None:
        self.plane, self.api, self.namespace, self.shards = plane, api, namespace, shards
        self.sidecar_url, self.lease_namespace = sidecar_url, lease_namespace
        self.running: list[Process] = []

    def start(self) -> float:
        """Spawn every process, and wait until each answers its liveness probe; when the first
        was spawned (monotonic)."""
        started = time.monotonic()
        for i in range(max(1, self.shards)):
            host = kafka_infra.LOOPBACK
            metrics = f"{host}:{kafka_infra.free_port()}"
            liveness = f"http://{host}:{kafka_infra.free_port()}/healthz"
            identity = f"b9-{self.shards}-{i}-{int(started) % 100_000}"  # new at every start
            log = self.plane.log_path(f"kafleet-operator-{self.shards}-{i}")
            cmd = [
                KAFLEET, "operator", "--namespace", self.namespace,
                "--kubeconfig", str(self.plane.kubeconfig), "--interval-s", f"{TICK_S:g}",
                "--sidecar-url", self.sidecar_url, "--metrics-address", metrics,
                "--liveness", liveness,
            ]  # fmt: skip
            if not JAVA_CLIENT.is_dir():
                raise RuntimeError(f"no Kafka Java client in {JAVA_CLIENT}: make share-jars")
            cmd += ["--share-classpath", f"{JAVA_CLIENT}/*"]
            if self.shards:
                cmd += ["--shards", str(self.shards), "--lease-namespace", self.lease_namespace,
                        "--identity", identity]  # fmt: skip
            pid = processes.spawn(cmd, log)
            self.running.append(Process(i, pid, identity, metrics, liveness, log))
        for process in self.running:
            if why := processes.wait_started(process.pid, process.log, _alive(process), 300):
                raise RuntimeError(f"kafleet operator {why}; read {process.log}")
        return started

    def stop(self) -> None:
        with ThreadPoolExecutor(max(1, len(self.running))) as pool:
            list(pool.map(lambda p: processes.stop(p.pid, timeout=30), self.running))
        self.running = []

    @property
    def pids(self) -> dict[str, int]:
        return {f"kafleet-operator-{p.index}": p.pid for p in self.running}

    @property
    def logs(self) -> dict[Path, str]:
        return {p.log: " ERROR " for p in self.running}

    def passes(self) -> float:
        """Every process's passes so far, all groups and results."""
        return sum(v for p in self.running for _, v in scrape(p.metrics, PASSES))

    def led(self) -> list[int]:
        """The shards each process leads now (1 for the single operator)."""
        found = (scrape(p.metrics, "kafleet_operator_shards_led") for p in self.running)
        return [int(sum(v for _, v in samples)) for samples in found]

    def balanced(self) -> bool:
        """Whether every shard is led by one of the processes, none over its share."""
        return not self.shards or self._leaders() is not None

    def settled(self, groups: list[str]) -> int:
        """How many of ``groups`` the process leading their shard has passed; 0 while a shard
        has no leader of ours or a process leads more than its share."""
        if not self.shards:
            alone = self._passed(self.running[0])
            return sum(name in alone for name in groups)
        leaders = self._leaders()
        if leaders is None:
            return 0
        passed = {p.identity: self._passed(p) for p in self.running}
        return sum(
            name in passed[leaders[shard_rule.shard_of(self.namespace, name, self.shards)].identity]
            for name in groups
        )

    def _leaders(self) -> list[Process] | None:
        """Each shard's leader, if every shard has one of ours and none leads over its share."""
        leases = kubernetes.client.CoordinationV1Api(self.api)
        holders = {
            lease.metadata.name: lease.spec.holder_identity or ""
            for lease in leases.list_namespaced_lease(self.lease_namespace).items
            if lease.metadata and lease.spec
        }
        ours = {p.identity: p for p in self.running}
        leaders: list[Process] = []
        for shard in range(self.shards):
            leader = ours.get(holders.get(shard_rule.lease_name(shard, self.shards), ""))
            if leader is None:
                return None
            leaders.append(leader)
        if max(map(leaders.count, leaders)) > math.ceil(self.shards / len(self.running)):
            return None
        return leaders

    def _passed(self, process: Process) -> set[str]:
        return {
            labels["consumergroup"]
            for labels, value in scrape(process.metrics, PASSES)
            if value > 0 and labels.get("result") == "ok"
            and labels.get("namespace") == self.namespace
        }  # fmt: skip

    @contextmanager
    def lease_writes(self, measured: Measured) -> Iterator[None]:
        """Over the block: the Lease writes (created, renewed, released, deleted) in the Lease
        namespace, a minute, into ``measured``. Nothing with no shards (no Leases)."""
        if not self.shards:
            yield
            return
        leases = kubernetes.client.CoordinationV1Api(self.api)
        listed = leases.list_namespaced_lease(self.lease_namespace)
        version = listed.metadata.resource_version if listed.metadata else None
        watch, seen = kubernetes.watch.Watch(), [0]  # type: ignore[no-untyped-call]

        def count() -> None:  # until the first event after ``stop``, or the watch's end
            try:
                for _ in watch.stream(  # type: ignore[no-untyped-call]
                    leases.list_namespaced_lease,
                    self.lease_namespace,
                    resource_version=version,
                    timeout_seconds=3600,
                ):
                    seen[0] += 1
            except (urllib3.exceptions.HTTPError, kubernetes.client.ApiException):
                return  # the processes or the plane stopped after the window: nothing to count

        thread = threading.Thread(target=count, daemon=True)
        started = time.monotonic()
        thread.start()
        try:
            yield
        finally:
            seconds = time.monotonic() - started
            measured.lease_writes_per_min = seen[0] / seconds * 60
            watch.stop()  # type: ignore[no-untyped-call]
            thread.join(timeout=10)


def _alive(process: Process) -> Callable[[], bool]:
    def alive() -> bool:  # kopf answers once its watches run
        with urllib.request.urlopen(process.liveness, timeout=2) as response:
            return bool(response.status == 200)

    return alive
