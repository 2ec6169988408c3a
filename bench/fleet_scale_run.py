"""What B9's scalers share at one N: the control plane, the topics and their groups, the broker's
JMX, the lag step, the window at rest; and the order of one scaler's measurement in it.

Owns: applying objects server-side in chunks and settling until they are Ready
(``apply_and_settle``), a namespace made and deleted around a scaler (``namespace``), one
scaler's measurement after it settled (``measure``: 30 s to rest, the window at rest, the step,
the errors its logs gained meanwhile), py-spy over the window with ``KAFLEET_B9_PROFILE=1``,
and a kubectl delete that ends no run (``cleanup``).

Does not own any scaler (``b9_fleet_scale.py`` and ``fleet_scale_shards.py``: kafleet;
``fleet_scale_keda.py``: KEDA), the figures (``fleet_scale_figures.py``) or the topics
(``fleet_scale_kafka.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes

from bench import fleet_scale_figures as figures
from bench import fleet_scale_probe as probe
from bench.fleet_scale_figures import Measured
from bench.fleet_scale_kafka import PARTITIONS, Topics
from bench.harness import RESULTS
from tests.infra import k8s
from tests.infra import kafka as kafka_infra

STEP_RECORDS, STEP_TIMEOUT_S = 2000, 240.0  # records into each topic of the step
CHUNK = 100  # objects per server-side apply
SPY = kafka_infra.REPO_ROOT / ".venv" / "bin" / "py-spy"


@dataclass(frozen=True)
class Run:
    """What every scaler of one N shares."""

    plane: k8s.ControlPlane
    topics: Topics
    jmx: probe.BrokerJmx
    step: list[str]  # the groups the lag step hits: every group of ``step_topics``
    step_topics: list[str]
    window_s: float

    @property
    def api(self) -> kubernetes.client.ApiClient:
        made = kubernetes.config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(self.plane.kubeconfig)
        )
        assert isinstance(made, kubernetes.client.ApiClient)
        return made

    def apply(self, namespace: str, objects: list[dict[str, Any]]) -> None:
        """Server-side, ``CHUNK`` objects a kubectl."""
        args = ("apply", "--server-side", "--field-manager=b9", "-n", namespace, "-f", "-")
        for i in range(0, len(objects), CHUNK):
            items = {"apiVersion": "v1", "kind": "List", "items": objects[i : i + CHUNK]}
            k8s.kubectl(self.plane.kubeconfig, *args, input=json.dumps(items), timeout=300)

    def apply_and_settle(
        self, measured: Measured, ns: str, objects: list[dict[str, Any]], ready: Callable[[], int]
    ) -> None:
        """Apply ``objects``; the seconds until ``ready()`` counts every group."""
        started = time.monotonic()
        self.apply(ns, objects)
        measured.settle_s, measured.ready = figures.settle(measured.groups, started, ready)

    @contextmanager
    def namespace(self, name: str, delete: bool = True, timeout_s: int = 600) -> Iterator[str]:
        """A namespace, deleted after the block (``delete``: if something still runs on this
        plane: a plane about to stop need not wait for it)."""
        self.plane.kubectl("create", "namespace", name)
        try:
            yield name
        finally:
            if delete:
                cleanup(self.plane, "delete", "namespace", name, timeout_s=timeout_s)

    def measure(
        self,
        measured: Measured,
        read: Callable[[str], tuple[bool, int]],
        pids: dict[str, int],
        logs: dict[Path, str],
        passes: Callable[[], float] | None = None,
        around: AbstractContextManager[object] | None = None,
        profile_as: str = "",
    ) -> None:
        """A scaler settled: 30 s to rest, the window (``around`` it: what else counts over it),
        the step; the errors the scaler logged from the window to the step's end (``logs``:
        each log and how it marks an error)."""
        time.sleep(min(30.0, self.window_s / 2))  # the first passes after settling are not rest
        sizes = {log: log.stat().st_size for log in logs}
        port = probe.port_of(self.topics.bootstrap)
        profiler = _profile(pids, profile_as, self.window_s)
        with around or nullcontext():
            figures.measure(
                measured, self.plane.kubeconfig, pids, self.jmx, port, self.window_s, passes
            )
        if profiler is not None:
            profiler.wait()
        measured.stepped = len(self.step)
        started = self.topics.produce(self.step_topics, STEP_RECORDS // PARTITIONS)
        figures.watch_step(measured, started, self.step, read, STEP_TIMEOUT_S)
        for log, marker in logs.items():
            with log.open("rb") as lines:
                lines.seek(sizes[log])
                measured.log_errors += sum(marker.encode() in line for line in lines)


def _profile(pids: dict[str, int], name: str, seconds: float) -> subprocess.Popen[bytes] | None:
    """With ``KAFLEET_B9_PROFILE=1`` and a ``name``: py-spy samples the first process of
    ``pids`` (and its reading child) over the window at rest, into
    ``bench/results/b9-<name>.pyspy`` (py-spy's raw format: one stack and its count a line).
    Only the thread holding the GIL is sampled (``--gil``): the Python that burns CPU, not a
    thread waiting for the GIL (which py-spy otherwise counts as busy, at the line it waits on)."""
    if not os.environ.get("KAFLEET_B9_PROFILE") or not name or not pids or not SPY.exists():
        return None
    out = RESULTS / f"b9-{name.replace(' ', '-')}.pyspy"
    RESULTS.mkdir(exist_ok=True)
    return subprocess.Popen(
        [str(SPY), "record", "-p", str(next(iter(pids.values()))), "-d", str(int(seconds)),
         "-r", "100", "-f", "raw", "-o", str(out), "--subprocesses", "--nonblocking", "--gil"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def cleanup(plane: k8s.ControlPlane, *args: str, timeout_s: int = 600) -> None:
    """A kubectl delete after a measurement: waited for up to ``timeout_s``, and one that takes
    longer (KEDA's finalizers on a thousand ScaledObjects) ends no run: the plane goes next."""
    try:
        plane.kubectl(*args, f"--timeout={timeout_s}s", check=False, timeout=timeout_s + 60)
    except subprocess.TimeoutExpired:
        print(
            f"kubectl {' '.join(args)} still waited after {timeout_s + 60} s; going on", flush=True
        )
