"""Fake nodes that the test bed's kwok runs: their shape, and keeping a set of them.

Owns: the Node object kwok takes up, above all the annotation ``kwok.x-k8s.io/node=fake``
(kwok runs with ``--manage-nodes-with-annotation-selector`` for it, so that it never touches
the real node: a Node without it is left alone, yet the scheduler still binds pods to it and
they stay Pending with only ``PodScheduled``), the ``type=kwok`` label tests and benchmarks
select, and a capacity (``allocatable.pods`` is what caps a node's pods; cpu and memory are
large enough for the pods' requests); keeping a named set of N extra fake nodes (applied,
the surplus deleted, waited on until Ready); and finding the nodes nothing runs.

Does not own: kwok's process and flags, or the plane's two nodes' names (``k8s.py``), nor
kubectl itself (it is handed in: ``Kubectl``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Protocol

ANNOTATION = "kwok.x-k8s.io/node"  # kwok's selector: --manage-nodes-with-annotation-selector
ANNOTATION_VALUE = "fake"
SET_LABEL = "kafleet.io/kwok-set"  # which set an extra node belongs to
DEFAULT_SET = "kwok-extra"
# Per extra node: 8 of them hold 10,000 pods. cpu and memory hold 1,250 of the operator's
# worker pods (100m and 256Mi by default, plus the sidecar's 10m and 32Mi) with room to spare.
DEFAULT_PODS = 1250
DEFAULT_CPU = "1000"
DEFAULT_MEMORY = "4Ti"
READY_TIMEOUT_S = 120

Node = dict[str, Any]


class Kubectl(Protocol):
    def __call__(self, *args: str, input: str | None = None, check: bool = True) -> str: ...


def node(
    name: str,
    pods: int = DEFAULT_PODS,
    cpu: str = DEFAULT_CPU,
    memory: str = DEFAULT_MEMORY,
    labels: dict[str, str] | None = None,
) -> Node:
    """A Node that kwok manages, with room for ``pods`` pods."""
    capacity = {"cpu": cpu, "memory": memory, "pods": str(pods)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {ANNOTATION: ANNOTATION_VALUE, "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                **(labels or {}),
            },
        },
        # Kept on create (a kubelet registers its node the same way); kwok's node-initialize
        # stage keeps a capacity it finds, and only without one gives its own.
        "status": {"allocatable": capacity, "capacity": dict(capacity)},
    }


def set_nodes(count: int, name: str = DEFAULT_SET, pods: int = DEFAULT_PODS) -> list[Node]:
    """The set ``name`` of ``count`` nodes: ``<name>-0`` ... ``<name>-<count-1>``."""
    return [node(f"{name}-{i}", pods, labels={SET_LABEL: name}) for i in range(count)]


def unmanaged(nodes: Iterable[Node]) -> list[str]:
    """The nodes that neither kwok nor a kubelet runs: without kwok's annotation and never
    reported on (no Ready condition, or the node controller's ``NodeStatusNeverUpdated``)."""
    found = []
    for item in nodes:
        annotations = item["metadata"].get("annotations") or {}
        if annotations.get(ANNOTATION) == ANNOTATION_VALUE:
            continue
        conditions = (item.get("status") or {}).get("conditions") or []
        ready = next((c for c in conditions if c.get("type") == "Ready"), None)
        if ready is None or ready.get("reason") == "NodeStatusNeverUpdated":
            found.append(item["metadata"]["name"])
    return found


def apply(kubectl: Kubectl, nodes: list[Node], timeout_s: int = READY_TIMEOUT_S) -> None:
    """Create (or update) ``nodes`` and wait until kwok has made each Ready."""
    if not nodes:
        return
    items = {"apiVersion": "v1", "kind": "List", "items": nodes}
    kubectl("apply", "-f", "-", input=json.dumps(items))
    names = [f"node/{n['metadata']['name']}" for n in nodes]
    kubectl("wait", "--for=condition=Ready", f"--timeout={timeout_s}s", *names)


def keep(
    kubectl: Kubectl, count: int, name: str = DEFAULT_SET, pods: int = DEFAULT_PODS
) -> list[str]:
    """Make the set ``name`` exactly ``count`` nodes of ``pods`` pods each, Ready: the missing
    are added, the surplus deleted (their pods with them). Returns the set's node names."""
    wanted = set_nodes(count, name, pods)
    apply(kubectl, wanted)
    names = {n["metadata"]["name"] for n in wanted}
    listed = kubectl("get", "nodes", "-l", f"{SET_LABEL}={name}", "-o", "name")
    surplus = [line for line in listed.split() if line.removeprefix("node/") not in names]
    if surplus:
        kubectl("delete", *surplus, "--wait=true")
    return sorted(names, key=lambda n: int(n.rsplit("-", 1)[1]))


def find_unmanaged(kubectl: Kubectl) -> list[str]:
    """The cluster's nodes that nothing runs (``unmanaged``)."""
    listed = kubectl("get", "nodes", "-o", "json", "--request-timeout=10s")
    return unmanaged(json.loads(listed)["items"])
