"""A fleet test bed for benchmarks: a control plane, the real node with the project's images, and
kafleet's operator installed from the chart with helm, as the end-to-end tests have it.

Owns: starting and stopping those three in order (``fleet_bed``), and what a benchmark needs to
run a ConsumerGroup's pods on the node: the kubeconfig, the watched namespace, the examples'
image, the pods' placement, kubectl, and the control plane itself (for KEDA beside it). Does not
own any benchmark's workload, nor the parts (``tests/infra/``: ``k8s.py``, ``node.py``,
``images.py``).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.infra import images, k8s, processes
from tests.infra import node as node_infra
from tests.infra.node_runtime import REAL_NODE_LABEL

REPO = Path(__file__).resolve().parents[1]
NAMESPACE = "bench"
OPERATOR_NAMESPACE = "kafleet-system"
# Pods go to the real node (tainted: nothing else lands there), never to kwok's fake ones.
PLACEMENT: dict[str, Any] = {
    "nodeSelector": {REAL_NODE_LABEL: "true"},
    "tolerations": [{"key": REAL_NODE_LABEL, "operator": "Exists", "effect": "NoSchedule"}],
}


@dataclass(frozen=True)
class Bed:
    kubeconfig: Path
    namespace: str
    image: str  # kafleet plus examples/ (load.py)
    plane: k8s.ControlPlane  # for what runs beside it (B8's real KEDA: ``keda.start_keda``)

    def kubectl(self, *args: str, input: str | None = None) -> str:
        return k8s.kubectl(self.kubeconfig, *args, input=input, timeout=180)

    def apply(self, manifest: dict[str, Any]) -> None:
        self.kubectl("apply", "-n", self.namespace, "-f", "-", input=yaml.safe_dump(manifest))

    def json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json"))

    def delete_group(self, name: str, timeout: float = 180) -> None:
        """Delete a ConsumerGroup and wait until its pods are gone."""
        self.kubectl("delete", "kcg", "-n", self.namespace, name, "--wait=false")
        deadline = time.monotonic() + timeout
        selector = f"app.kubernetes.io/instance={name}"
        while time.monotonic() < deadline:
            pods = self.json("get", "pods", "-n", self.namespace, "-l", selector)["items"]
            if not pods:
                return
            time.sleep(2)
        raise RuntimeError(f"the pods of {name} were still there {timeout:.0f} s after")


@contextmanager
def fleet_bed(workdir: Path, interval_s: float = 5.0) -> Iterator[Bed]:
    """Control plane, real node (images built or reused) and the operator (``interval_s``: the
    chart's ``intervalSeconds``, 5 by default), stopped in reverse order."""
    # A bench that was killed leaves its plane and node running: stop them first.
    processes.reap_stale_runs(k8s.RUNS)
    node_infra.reap_stale_nodes()
    plane = k8s.start_control_plane(k8s.RUNS / f"session-{os.getpid()}")
    try:
        built = {ref: tar for ref, tar in images.build_all().items() if ref != images.SPARK_IMAGE}
        node = node_infra.start_node(plane, node_infra.session_workdir(), images=built)
        try:
            bed = Bed(plane.kubeconfig, NAMESPACE, images.EXAMPLES_IMAGE, plane)
            for namespace in (NAMESPACE, OPERATOR_NAMESPACE):
                bed.kubectl("create", "namespace", namespace)
            repository = images.KAFLEET_IMAGE.rpartition(":")[0]
            values = {
                "image": {"repository": repository, "pullPolicy": "Never"},
                "watchNamespaces": [NAMESPACE],
                "intervalSeconds": interval_s,
                **PLACEMENT,
            }
            values_file = workdir / "values.yaml"
            values_file.write_text(yaml.safe_dump(values))
            chart = str(REPO / "charts" / "kafleet")
            k8s.helm(plane.kubeconfig, "install", "kafleet", chart, "-n", OPERATOR_NAMESPACE,
                  "-f", str(values_file), "--wait", "--timeout=180s")  # fmt: skip
            yield bed
        finally:
            node.stop()
    finally:
        plane.stop()
