"""Real KEDA beside the test bed: built from its Go module, run as two processes on the loopback.

Owns: building KEDA's operator and metrics adapter (``keda-tools/``: a scratch module, because
KEDA's go.mod has a ``replace`` line that ``go install pkg@version`` refuses) into
``.cache/keda/<version>/bin``, reused until the version or go.sum change; and ``start_keda``:
its CRDs (from the module), a certificate folder (``pki.py``), the operator and the adapter
as processes, the ``ExternalName`` Service and ``APIService`` that route the apiserver's
``external.metrics.k8s.io`` to the adapter, waiting until that API answers, and taking the
routing away and stopping both processes by their pids after. What it took is in
``../shared/KEDA.md``.

Does not own the control plane (``k8s.py``: its apiserver already has the aggregation flags) or
what a benchmark or test does with KEDA. It never builds while a test waits: a test bed
without the binaries fails, saying to run ``make keda``.

    python -m tests.infra.keda build   # build what is missing, print the bin folder
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.infra import k8s, k8s_build, pki, processes
from tests.infra.kafka import LOOPBACK, REPO_ROOT, TestbedError
from tests.infra.ports import free_port

KEDA_VERSION = "v2.21.0"
MODULE_DIR = Path(__file__).with_name("keda-tools")
CACHE = REPO_ROOT / ".cache" / "keda" / KEDA_VERSION
BIN = CACHE / "bin"
COMMANDS = {"keda-operator": "cmd/operator", "keda-adapter": "cmd/adapter"}
MODULE = "github.com/kedacore/keda/v2"
NAMESPACE = "keda"
GRPC_AUTHORITY = "keda-operator.keda.svc.cluster.local"
# The Service the APIService names: an ExternalName for ``localhost`` (Endpoints may not hold
# loopback addresses; the aggregator resolves an ExternalName itself).
ADAPTER_SERVICE = "keda-metrics-apiserver"
API_SERVICE = "v1beta1.external.metrics.k8s.io"
EXTERNAL_METRICS = "/apis/external.metrics.k8s.io/v1beta1"
START_TIMEOUT_S = 120.0  # the API answers about 20 s after the adapter starts (KEDA.md)


def _fingerprint() -> str:
    digest = hashlib.sha256(KEDA_VERSION.encode())
    for name in ("go.mod", "go.sum"):
        digest.update((MODULE_DIR / name).read_bytes())
    return digest.hexdigest()


def built() -> Path | None:
    """The folder holding both commands if they are built for this version and go.sum."""
    marker = BIN / ".complete"
    if marker.exists() and marker.read_text() == _fingerprint():
        return BIN
    return None


def build(log: bool = True) -> Path:
    """Build KEDA's two commands if missing or stale; the folder that holds them."""
    if found := built():
        return found
    env = k8s_build.go_env()
    BIN.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    if log:
        print(
            f"building KEDA {KEDA_VERSION} into {BIN} (the first time takes a while)",
            file=sys.stderr,
        )
    for binary, package in COMMANDS.items():
        k8s_build._go(
            "build",
            "-trimpath",
            "-ldflags=-s -w",
            "-o",
            str(BIN / binary),
            f"{MODULE}/{package}",
            cwd=MODULE_DIR,
            env=env,
        )
    (BIN / ".complete").write_text(_fingerprint())
    if log:
        print(f"built in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return BIN


def crds() -> list[Path]:
    """KEDA's CRDs, from the module it was built from."""
    out = k8s_build._go("list", "-m", "-f", "{{.Dir}}", MODULE, cwd=MODULE_DIR)
    folder = Path(out.strip()) / "config" / "crd" / "bases"
    found = sorted(folder.glob("*.yaml"))
    if not found:
        raise TestbedError(f"KEDA {KEDA_VERSION}'s module has no CRDs in {folder}")
    return found


@dataclass(frozen=True)
class Keda:
    """A running KEDA: the kubeconfig both processes use (the control plane's admin), their
    pids by command (``/proc/<pid>`` for CPU and memory), their logs, and the ``host:port`` of
    the operator's Prometheus metrics."""

    kubeconfig: Path
    pids: dict[str, int]
    logs: dict[str, Path]
    metrics_address: str


def _routing(port: int) -> list[dict[str, Any]]:
    """The Service and APIService that send ``external.metrics.k8s.io`` to the adapter's
    ``port`` on this machine's loopback."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": ADAPTER_SERVICE, "namespace": NAMESPACE},
            "spec": {
                "type": "ExternalName",
                "externalName": "localhost",
                "ports": [{"name": "https", "port": port, "targetPort": port}],
            },
        },
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": API_SERVICE},
            "spec": {
                "service": {"name": ADAPTER_SERVICE, "namespace": NAMESPACE, "port": port},
                "group": "external.metrics.k8s.io",
                "version": "v1beta1",
                "insecureSkipTLSVerify": True,  # the adapter's certificate names no Service
                "groupPriorityMinimum": 100,
                "versionPriority": 100,
            },
        },
    ]


def _apply(plane: k8s.ControlPlane, *objects: dict[str, Any]) -> None:
    plane.kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    )


def _install_crds(plane: k8s.ControlPlane) -> None:
    """KEDA's CRDs, applied server-side (they are too large for the last-applied annotation),
    and established."""
    files = [arg for crd in crds() for arg in ("-f", str(crd))]
    names = plane.kubectl("apply", "--server-side", "--force-conflicts", "-o", "name", *files)
    plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names.split())


def _operator_cmd(
    bin_dir: Path,
    plane: k8s.ControlPlane,
    certs: Path,
    ports: dict[str, int],
    kube_api_qps: float | None,
    kube_api_burst: int | None,
) -> list[str]:
    return [
        str(bin_dir / "keda-operator"),
        f"--kubeconfig={plane.kubeconfig}",
        f"--cert-dir={certs}",
        "--enable-cert-rotation=false",
        "--enable-webhook-patching=false",
        "--enable-apiservice-patching=false",
        f"--metrics-bind-address={LOOPBACK}:{ports['metrics']}",
        f"--health-probe-bind-address={LOOPBACK}:{ports['probes']}",
        f"--metrics-service-bind-address={LOOPBACK}:{ports['grpc']}",
        *([f"--kube-api-qps={kube_api_qps:g}"] if kube_api_qps is not None else []),
        *([f"--kube-api-burst={kube_api_burst}"] if kube_api_burst is not None else []),
    ]


def _adapter_cmd(
    bin_dir: Path, plane: k8s.ControlPlane, certs: Path, ports: dict[str, int]
) -> list[str]:
    kc = plane.kubeconfig
    return [
        str(bin_dir / "keda-adapter"),
        # --lister-kubeconfig, not --kubeconfig: without it the adapter looks for in-cluster
        # configuration and exits.
        f"--lister-kubeconfig={kc}",
        f"--authentication-kubeconfig={kc}",
        f"--authorization-kubeconfig={kc}",
        f"--secure-port={ports['adapter']}",
        f"--bind-address={LOOPBACK}",
        f"--cert-dir={certs}",
        f"--tls-cert-file={certs / 'tls.crt'}",
        f"--tls-private-key-file={certs / 'tls.key'}",
        f"--metrics-service-address={LOOPBACK}:{ports['grpc']}",
        f"--metrics-service-grpc-authority={GRPC_AUTHORITY}",
        f"--port={ports['adapter-metrics']}",
    ]


@contextmanager
def start_keda(
    plane: k8s.ControlPlane,
    timeout: float = START_TIMEOUT_S,
    kube_api_qps: float | None = None,
    kube_api_burst: int | None = None,
) -> Iterator[Keda]:
    """KEDA on ``plane``, its external metrics API answering; stopped on exit.

    ``kube_api_qps`` / ``kube_api_burst`` set the operator's client-side rate limit towards the
    apiserver (KEDA's defaults: 20 / 30), which sets how fast many ScaledObjects settle. The logs
    are ``keda-operator.log`` and ``keda-adapter.log`` beside the control plane's. ScaledObjects
    still there when it stops keep KEDA's finalizer: delete them while it runs."""
    bin_dir = built()
    if bin_dir is None:
        raise TestbedError(
            f"KEDA {KEDA_VERSION} is not built in {BIN}: run `make keda` first (once; 10 to 20 "
            "minutes)"
        )
    _install_crds(plane)
    _apply(plane, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    certs = plane.workdir / "keda-certs"
    shutil.rmtree(certs, ignore_errors=True)
    pki.keda(certs, ("localhost", LOOPBACK, GRPC_AUTHORITY))
    ports = {
        name: free_port() for name in ("metrics", "probes", "grpc", "adapter", "adapter-metrics")
    }
    env = {
        **os.environ,
        "POD_NAMESPACE": NAMESPACE,
        "WATCH_NAMESPACE": "",  # all namespaces; unset is an error
        "KEDA_CLUSTER_OBJECT_NAMESPACE": NAMESPACE,
        "KUBECONFIG": str(plane.kubeconfig),
    }
    logs = {name: plane.log_path(name) for name in COMMANDS}
    pids: dict[str, int] = {}
    routed = False
    try:
        pids["keda-operator"] = processes.spawn(
            _operator_cmd(bin_dir, plane, certs, ports, kube_api_qps, kube_api_burst),
            logs["keda-operator"],
            env=env,
        )

        def operator_ready() -> bool:
            url = f"http://{LOOPBACK}:{ports['probes']}/readyz"
            with urllib.request.urlopen(url, timeout=2) as response:
                return bool(response.status == 200)

        started = time.monotonic()
        why = processes.wait_started(
            pids["keda-operator"], logs["keda-operator"], operator_ready, timeout
        )
        if why:
            raise TestbedError(f"keda-operator {why}; read {logs['keda-operator']}")
        pids["keda-adapter"] = processes.spawn(
            _adapter_cmd(bin_dir, plane, certs, ports), logs["keda-adapter"], env=env
        )
        routed = True
        _apply(plane, *_routing(ports["adapter"]))

        def api_answers() -> bool:
            if not processes.alive(pids["keda-operator"]):
                raise TestbedError(f"keda-operator exited; read {logs['keda-operator']}")
            return '"groupVersion"' in plane.kubectl("get", "--raw", EXTERNAL_METRICS, check=False)

        left = max(1.0, timeout - (time.monotonic() - started))
        why = processes.wait_started(pids["keda-adapter"], logs["keda-adapter"], api_answers, left)
        if why:
            raise TestbedError(
                f"KEDA's external metrics API ({EXTERNAL_METRICS}) did not answer: keda-adapter "
                f"{why}; read {logs['keda-adapter']} (and the apiserver's "
                f"{plane.log_path('kube-apiserver')})"
            )
        yield Keda(plane.kubeconfig, dict(pids), logs, f"{LOOPBACK}:{ports['metrics']}")
    finally:
        if routed:  # an APIService without its server fails every client's API discovery
            plane.kubectl(
                "delete", "apiservice", API_SERVICE, "--ignore-not-found", "--wait=false",
                "--request-timeout=10s", check=False,
            )  # fmt: skip
        for name in ("keda-adapter", "keda-operator"):
            processes.stop(pids.get(name), timeout=15)


def main(argv: list[str] | None = None) -> int:
    command = (argv or sys.argv[1:] or ["build"])[0]
    if command != "build":
        print(f"usage: python -m tests.infra.keda build (not {command!r})", file=sys.stderr)
        return 2
    try:
        print(build())
    except TestbedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
