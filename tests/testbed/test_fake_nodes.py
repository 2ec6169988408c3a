"""Fake nodes added the documented way (``make k8s-nodes``: ``python -m tests.infra.k8s nodes``)
are run by kwok: Ready, with the pod capacity asked for, and their pods Running. A node made
without kwok's annotation is not, and the command names it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
from kubernetes.client import CoreV1Api

from tests.conftest import REPO, K8s
from tests.infra import kwok_nodes
from tests.infra.waiting import wait_until

SET = "testbed-extra"
PODS = 2500


def nodes_command(k8s: K8s, count: int) -> subprocess.CompletedProcess[str]:
    """What ``make k8s-nodes KWOK_NODES=<count> KWOK_NODE_PODS=2500`` runs, on this session's
    control plane."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.infra.k8s", "nodes", str(count), "--pods", str(PODS),
         "--set", SET, "--kubeconfig", str(k8s.kubeconfig)],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"`k8s nodes {count}` failed: {done.stderr}"
    return done


@pytest.fixture
def extra_nodes(k8s: K8s) -> Iterator[list[str]]:
    """Two extra fake nodes, removed after the test (other tests expect the plane's two)."""
    try:
        yield nodes_command(k8s, 2).stdout.split()
    finally:
        nodes_command(k8s, 0)


def pod(name: str, node: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [{"name": "c", "image": "example.invalid/bare:1"}],
        },
    }


def phase(k8s: K8s, namespace: str, name: str) -> str:
    status = CoreV1Api(k8s.api).read_namespaced_pod(name, namespace).status
    return str(status.phase if status is not None else None)


def test_a_fake_node_carries_kwoks_annotation_its_pod_capacity_and_the_kwok_label() -> None:
    node = kwok_nodes.node("n-0", pods=PODS)

    assert node["metadata"]["annotations"][kwok_nodes.ANNOTATION] == "fake"
    assert node["metadata"]["labels"]["type"] == "kwok"
    assert node["status"]["allocatable"]["pods"] == str(PODS)
    assert kwok_nodes.unmanaged([node]) == []
    assert kwok_nodes.unmanaged([{"metadata": {"name": "plain"}, "status": {}}]) == ["plain"]


def test_fake_nodes_added_with_the_nodes_command_are_ready_and_run_a_pod_pinned_to_them(
    k8s: K8s, namespace: str, extra_nodes: list[str]
) -> None:
    assert extra_nodes == [f"{SET}-0", f"{SET}-1"]
    for name in extra_nodes:
        node = CoreV1Api(k8s.api).read_node(name)
        assert node.status.allocatable["pods"] == str(PODS)
        assert {c.type: c.status for c in node.status.conditions}["Ready"] == "True"

    k8s.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(pod("bare", extra_nodes[1])))

    wait_until(lambda: phase(k8s, namespace, "bare") == "Running", 30, "kwok to run the pod")
    bound = CoreV1Api(k8s.api).read_namespaced_pod("bare", namespace).spec
    assert bound is not None
    assert bound.node_name == extra_nodes[1]


def test_a_node_without_kwoks_annotation_keeps_its_pod_pending_and_the_command_names_it(
    k8s: K8s, namespace: str, extra_nodes: list[str]
) -> None:
    """What a user met who added nodes by hand: the scheduler binds pods to such a node, and
    nothing ever runs them."""
    plain = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "testbed-plain"}}
    k8s.kubectl("apply", "-f", "-", input=json.dumps(plain))
    try:
        warned = nodes_command(k8s, 2).stderr
        for name, node in (("on-plain", "testbed-plain"), ("on-fake", extra_nodes[0])):
            k8s.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(pod(name, node)))

        wait_until(lambda: phase(k8s, namespace, "on-fake") == "Running", 30, "the fake node's pod")
        assert phase(k8s, namespace, "on-plain") == "Pending"
        assert "node testbed-plain has no annotation kwok.x-k8s.io/node=fake" in warned
    finally:
        # Nothing would confirm a graceful deletion of a pod on a node nothing runs.
        force = ("--force", "--grace-period=0")
        k8s.kubectl("delete", "pod", "on-plain", "-n", namespace, *force, check=False)
        k8s.kubectl("delete", "node", "testbed-plain", check=False)
