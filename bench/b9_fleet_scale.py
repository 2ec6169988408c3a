"""B9, fleet scale: N ConsumerGroups on one kafleet operator beside N ScaledObjects on real KEDA,
the same topics, the same lag step, the same control plane and broker.

For each N (100, 300, 1,000; ``--quick``: 20): N topics of 8 partitions, every group's offsets
at the log end (``fleet_scale_kafka.py``); a fresh control plane with kwok nodes big enough for
every pod (none runs: kwok marks them Running and Ready). Then each scaler in a namespace of its
own, one after the other: kafleet (one ``kafleet operator`` process on this host, interval 5 s,
its calls to sidecars answered by ``FakeSidecars``) with N ConsumerGroups (autoscaling 1..8 at
``lag_per_replica`` 100, defaults otherwise), then KEDA (``tests/infra/keda.py``) with N
Deployments of one replica and a ScaledObject each (kafka trigger, ``lagThreshold`` 100,
``pollingInterval`` 5, 1..8), both applied server-side in chunks. For each: the time from the
apply until every object is Ready (a ScaledObject: and its HPA seen, ``HPAActive``); at rest
(from 30 s later), over a window, the scaler's processes and their children from /proc (CPU,
peak RSS, threads, fds, connections to the broker), the broker's requests (JMX) and the
apiserver's requests (its /metrics, the control plane's own heartbeats left out); then 2,000
records into the topics of 10 random groups and, per group, the time to the scaler's decision
(kafleet: the ConsumerGroup's ``spec.replicas``; KEDA: its HPA's ``desiredReplicas``) and to
the Deployment's 8 replicas. Last, the topics are deleted, timed.

Each size's raw figures are written to ``bench/results/b9-samples.json`` as soon as it is
measured; with ``KAFLEET_B9_RESUME=1`` the sizes found there are not measured again;
``KAFLEET_B9_PROFILE=1`` (with py-spy in the virtual environment) profiles kafleet's operator
over each window at rest.

Owns the workload, its order and the table. Does not own the readers (``fleet_scale_probe.py``),
the topics (``fleet_scale_kafka.py``), the control plane (``tests/infra/k8s.py``) or KEDA
(``tests/infra/keda.py``).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import kubernetes

from bench import fleet_scale_figures as figures
from bench import fleet_scale_probe as probe
from bench.fleet_scale_figures import Measured
from bench.fleet_scale_kafka import PARTITIONS, Topics
from bench.harness import RESULTS, Context, Table
from tests.infra import k8s, kwok_nodes, processes, waiting
from tests.infra import kafka as kafka_infra
from tests.infra import keda as keda_infra

SIZES, QUICK_SIZES = (100, 300, 1000), (20,)
INTERVAL_S, THRESHOLD, MAX_REPLICAS = figures.TICK_S, 100, figures.FULL
STEP_GROUPS, STEP_RECORDS, STEP_TIMEOUT_S = 10, 2000, 240.0
NODE_PODS = 1000  # pods per kwok node of B9's own (the plane's two take 110 each)
PLACEMENT = {"nodeSelector": {"type": "kwok"}}
IMAGE = "registry.example.com/worker:1"  # never pulled: kwok runs no container
CHUNK = 100  # objects per server-side apply
WORKDIR = kafka_infra.CACHE.parent / "bench-b9"
KAFLEET = str(kafka_infra.REPO_ROOT / ".venv" / "bin" / "kafleet")
CRDS, CRD = kafka_infra.REPO_ROOT / "crds", "consumergroups.kafleet.io"


@dataclass(frozen=True)
class Run:
    """What both halves of one N share."""

    plane: k8s.ControlPlane
    topics: Topics
    jmx: probe.BrokerJmx
    step: list[str]  # the groups the lag step hits
    window_s: float

    @property
    def api(self) -> kubernetes.client.ApiClient:
        return kubernetes.config.new_client_from_config(config_file=str(self.plane.kubeconfig))

    def apply(self, namespace: str, objects: list[dict[str, Any]]) -> None:
        """Server-side, ``CHUNK`` objects a kubectl."""
        args = ("apply", "--server-side", "--field-manager=b9", "-n", namespace, "-f", "-")
        for i in range(0, len(objects), CHUNK):
            items = {"apiVersion": "v1", "kind": "List", "items": objects[i : i + CHUNK]}
            k8s.kubectl(self.plane.kubeconfig, *args, input=json.dumps(items), timeout=300)

    @contextmanager
    def namespace(self, name: str) -> Iterator[str]:
        self.plane.kubectl("create", "namespace", name)
        try:
            yield name
        finally:
            _cleanup(self.plane, "delete", "namespace", name)

    def measure(
        self,
        measured: Measured,
        ns: str,
        objects: list[dict[str, Any]],
        ready: Callable[[], int],
        read: Callable[[str], tuple[bool, int]],
        pids: dict[str, int],
        logs: dict[Path, str],
        passes: Callable[[], float] | None = None,
    ) -> None:
        """Apply, settle, a window at rest, the step; the errors the scaler logged at rest and
        in the step (``logs``: each log and how it marks an error)."""
        started = time.monotonic()
        self.apply(ns, objects)
        figures.settle(measured, started, ready)
        time.sleep(min(30.0, self.window_s / 2))  # the first passes after Ready are not rest
        sizes = {log: log.stat().st_size for log in logs}
        port = probe.port_of(self.topics.bootstrap)
        profiler = _profile(pids, measured.groups, self.window_s)
        figures.measure(
            measured, self.plane.kubeconfig, pids, self.jmx, port, self.window_s, passes
        )
        if profiler is not None:
            profiler.wait()
        started = self.topics.produce(self.step, STEP_RECORDS // PARTITIONS)
        figures.watch_step(measured, started, self.step, read, STEP_TIMEOUT_S)
        for log, marker in logs.items():
            with log.open("rb") as lines:
                lines.seek(sizes[log])
                measured.log_errors += sum(marker.encode() in line for line in lines)


def _profile(pids: dict[str, int], n: int, seconds: float) -> subprocess.Popen[bytes] | None:
    """With ``KAFLEET_B9_PROFILE=1``: py-spy samples kafleet's operator (and its reading
    child) over the window at rest, into ``bench/results/b9-kafleet-<n>.pyspy`` (py-spy's raw
    format: one stack and its count per line)."""
    pid = pids.get("kafleet-operator")
    spy = Path(KAFLEET).parent / "py-spy"
    if not os.environ.get("KAFLEET_B9_PROFILE") or pid is None or not spy.exists():
        return None
    out = RESULTS / f"b9-kafleet-{n}.pyspy"
    RESULTS.mkdir(exist_ok=True)
    return subprocess.Popen(
        [str(spy), "record", "-p", str(pid), "-d", str(int(seconds)), "-r", "100", "-f", "raw",
         "-o", str(out), "--subprocesses", "--nonblocking"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def _nodes(plane: k8s.ControlPlane, pods: int) -> None:
    """kwok nodes enough for ``pods``, made as ``make k8s-nodes`` makes them (``kwok_nodes``)."""
    kwok_nodes.keep(plane.kubectl, pods // NODE_PODS + 1, "b9-kwok", NODE_PODS)


def _established(plane: k8s.ControlPlane) -> bool:
    crd = json.loads(plane.kubectl("get", "crd", CRD, "-o", "json"))
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def _passes(address: str) -> float:
    """The operator's passes so far, all groups and results."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        lines = response.read().decode().splitlines()
    return sum(
        float(x.rsplit(" ", 1)[1]) for x in lines if x.startswith("kafleet_operator_passes_total")
    )


def _kafleet(run: Run, bootstrap: str) -> Measured:
    measured, sidecars = Measured(len(run.topics.names)), probe.FakeSidecars()
    metrics = f"{kafka_infra.LOOPBACK}:{kafka_infra.free_port()}"
    groups = [
        {"apiVersion": "kafleet.io/v1alpha1", "kind": "ConsumerGroup", "metadata": {"name": name},
         "spec": {"image": IMAGE, "handler": "orders:bill", "bootstrap_servers": bootstrap,
                  "group_id": name, "topics": [name], "replicas": 1, "pod_template": PLACEMENT,
                  "autoscaling": {"min_replicas": 1, "max_replicas": MAX_REPLICAS,
                                  "lag_per_replica": THRESHOLD,
                                  "scale_up_max_pods": MAX_REPLICAS}}}
        for name in run.topics.names
    ]  # fmt: skip
    with run.namespace("b9-kafleet") as ns:
        liveness = f"http://{kafka_infra.LOOPBACK}:{kafka_infra.free_port()}/healthz"
        log = run.plane.log_path("kafleet-operator")
        pid = processes.spawn(
            [KAFLEET, "operator", "--namespace", ns, "--kubeconfig", str(run.plane.kubeconfig),
             "--interval-s", f"{INTERVAL_S:g}", "--sidecar-url", sidecars.url, "--liveness",
             liveness, "--metrics-address", metrics],
            log,
        )  # fmt: skip

        custom = kubernetes.client.CustomObjectsApi(run.api)
        apps = kubernetes.client.AppsV1Api(custom.api_client)
        kind = ("kafleet.io", "v1alpha1", ns, "consumergroups")

        def alive() -> bool:  # kopf answers once its watches run
            with urllib.request.urlopen(liveness, timeout=2) as response:
                return bool(response.status == 200)

        def ready() -> int:
            return sum(map(figures.ready, custom.list_namespaced_custom_object(*kind)["items"]))

        def read(name: str) -> tuple[bool, int]:
            wished = custom.get_namespaced_custom_object(*kind, name)["spec"].get("replicas", 1)
            return wished > 1, apps.read_namespaced_deployment(name, ns).spec.replicas or 0

        try:
            if why := processes.wait_started(pid, log, alive, 60):
                raise RuntimeError(f"kafleet operator {why}; read {log}")
            pids, errors = {"kafleet-operator": pid}, {log: " ERROR "}
            run.measure(measured, ns, groups, ready, read, pids, errors, lambda: _passes(metrics))
        finally:
            processes.stop(pid, timeout=30)
            sidecars.close()
    return measured


def _keda(run: Run, bootstrap: str) -> Measured:
    measured = Measured(len(run.topics.names))
    deployments = [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
         "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                  "template": {"metadata": {"labels": {"app": name}}, "spec": {
                      **PLACEMENT, "containers": [{"name": "worker", "image": IMAGE}]}}}}
        for name in run.topics.names
    ]  # fmt: skip
    scaled = [
        {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": name},
         "spec": {"scaleTargetRef": {"name": name}, "pollingInterval": int(INTERVAL_S),
                  "minReplicaCount": 1, "maxReplicaCount": MAX_REPLICAS,
                  "advanced": {"horizontalPodAutoscalerConfig": {"behavior": {"scaleUp": {
                      "policies": [{"type": "Pods", "value": MAX_REPLICAS,
                                    "periodSeconds": 15}]}}}},
                  "triggers": [{"type": "kafka", "metadata": {
                      "bootstrapServers": bootstrap, "consumerGroup": name, "topic": name,
                      "lagThreshold": str(THRESHOLD)}}]}}
        for name in run.topics.names
    ]  # fmt: skip
    with keda_infra.start_keda(run.plane) as keda, run.namespace("b9-keda") as ns:
        custom = kubernetes.client.CustomObjectsApi(run.api)
        apps = kubernetes.client.AppsV1Api(custom.api_client)
        hpas = kubernetes.client.AutoscalingV2Api(custom.api_client)
        kind = ("keda.sh", "v1alpha1", ns, "scaledobjects")

        def ready() -> int:  # and the HPA seen: KEDA's last status write of a new one
            found = custom.list_namespaced_custom_object(*kind)["items"]
            return sum(figures.ready(so, also="HPAActive") for so in found)

        def read(name: str) -> tuple[bool, int]:
            hpa = hpas.read_namespaced_horizontal_pod_autoscaler(f"keda-hpa-{name}", ns)
            wished = ((hpa.status and hpa.status.desired_replicas) or 0) > 1
            return wished, apps.read_namespaced_deployment(name, ns).spec.replicas or 0

        run.apply(ns, deployments)
        try:
            logs = dict.fromkeys(keda.logs.values(), '"level":"error"')
            run.measure(measured, ns, scaled, ready, read, keda.pids, logs)
        finally:  # while KEDA runs: its finalizer would hold them
            _cleanup(run.plane, "delete", "scaledobjects", "--all", "-n", ns)
    return measured


def _cleanup(plane: k8s.ControlPlane, *args: str) -> None:
    """A kubectl delete after a measurement: waited for up to 10 minutes, and one that takes
    longer (KEDA's finalizers on a thousand ScaledObjects) ends no run: the plane goes next."""
    try:
        plane.kubectl(*args, "--timeout=600s", check=False, timeout=660)
    except subprocess.TimeoutExpired:
        print(f"kubectl {' '.join(args)} was still waiting after 660 s; going on", flush=True)


def _one_size(ctx: Context, n: int, jmx: probe.BrokerJmx, window_s: float,
              notes: list[str]) -> dict[str, Measured]:  # fmt: skip
    """Both scalers at ``n`` groups (fewer if the broker holds fewer topics)."""
    topics = Topics(ctx.bootstrap, probe.broker_pid(ctx.bootstrap))
    topics.create(f"b9-{n}-{int(time.time()) % 10_000}", n)
    topics.fill()
    if topics.refused:
        notes.append(f"N={n}: the broker took {len(topics.names)} topics: {topics.refused}")
    step = random.Random(n).sample(topics.names, min(STEP_GROUPS, len(topics.names)))
    processes.reap_stale_runs(WORKDIR)
    try:
        plane = k8s.start_control_plane(WORKDIR / f"session-{os.getpid()}" / f"n{n}")
        try:
            _nodes(plane, len(topics.names) + STEP_GROUPS * MAX_REPLICAS)
            plane.kubectl("apply", "--server-side", "-f", str(CRDS))
            waiting.wait_until(lambda: _established(plane), 60, f"{CRD} established", every=0.5)
            run = Run(plane, topics, jmx, step, window_s)
            measured = {"kafleet": _kafleet(run, ctx.bootstrap)}
            if keda_infra.built() is not None:
                topics.commit_at_end(step)  # lag 0 again
                measured["KEDA"] = _keda(run, ctx.bootstrap)
        finally:
            plane.stop()
    finally:
        unlisted, closed = topics.delete()
        notes.append(
            f"N={n}: {len(topics.names) * PARTITIONS:,} partitions created and led in "
            f"{topics.created_s:.1f} s; deleted: unlisted after {unlisted:.1f} s, their files "
            f"closed after {closed:.0f} s"
        )
    return measured


def run(ctx: Context) -> Table:
    sizes, window_s = (QUICK_SIZES, 30.0) if ctx.quick else (SIZES, 60.0)
    jmx = probe.BrokerJmx(probe.broker_pid(ctx.bootstrap))
    columns = ["figure"] + [c for n in sizes for c in (f"kafleet {n}", f"KEDA {n}", "ratio")]
    table = Table("b9", "fleet scale: N groups on one kafleet operator and on KEDA", columns)
    samples = RESULTS / "b9-samples.json"
    raw: dict[str, dict[str, Any]] = {}
    if os.environ.get("KAFLEET_B9_RESUME") and samples.exists():  # sizes measured already
        raw = json.loads(samples.read_text())
    for n in sizes:
        if str(n) in raw:
            measured = {tool: Measured(**m) for tool, m in raw[str(n)].items()}
        else:
            measured = _one_size(ctx, n, jmx, window_s, table.notes)
            raw[str(n)] = {tool: asdict(m) for tool, m in measured.items()}
            RESULTS.mkdir(exist_ok=True)
            samples.write_text(json.dumps(raw, indent=1))  # each size kept as soon as measured
        found = {tool: figures.rows(m, STEP_GROUPS) for tool, m in measured.items()}
        for i, (label, mine) in enumerate(found["kafleet"].items()):
            if len(table.rows) <= i:
                table.rows.append([label])
            theirs = found.get("KEDA", {}).get(label)
            table.rows[i] += [mine, "-" if theirs is None else theirs, figures.ratio(mine, theirs)]
    table.notes += [
        f"each N: a control plane of its own with kwok nodes; kafleet's operator (--interval-s "
        f"{INTERVAL_S:g}), then KEDA {keda_infra.KEDA_VERSION} (pollingInterval {INTERVAL_S:g}, "
        "the HPA's 15 s sync), each in a namespace of its own; autoscaling 1..8 at 100 records "
        "a replica, both allowed up to 8 pods per 15 s (kafleet's scale_up_max_pods, the HPA's "
        "scaleUp policy), so a step can reach full scale at once (by default both add at most "
        f"4 pods or 100 % per 15 s: 1, 5 or 4, 8); the step: {STEP_RECORDS:,} records into "
        f"each of {STEP_GROUPS} random topics",
        "a tick is 5 s; KEDA's CPU, RSS, threads, fds and connections are its operator's and "
        "adapter's summed; apiserver requests leave out watches, leases and nodes, and count "
        "the HPA controller's (externalmetrics, deployments/scale, HPAs) as KEDA's",
        "decision: kafleet's spec.replicas, KEDA's HPA desiredReplicas, leaving 1; p99 of "
        "10 groups is their slowest (nearest rank); kafleet's sidecar calls go to one fake "
        "sidecar answering as a worker that applied the default max_poll_records; raw "
        f"samples in {RESULTS / 'b9-samples.json'}",
    ]
    if keda_infra.built() is None:
        table.notes.append(f"KEDA is not built ({keda_infra.BIN}): make keda")
    return table
