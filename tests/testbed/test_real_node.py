"""The real node works: a kubelet with containerd, runc and the CNI bridge joins the test bed's
control plane tainted and labelled for real-node tests only, runs pods in real containers, routes
the `kubernetes` Service to the apiserver with kube-proxy, leaves the host's sysctls alone, and
leaves nothing behind when it stops (the session's ``real_node`` fixture checks that after
stopping it: tests/conftest.py)."""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
import time
from typing import Any

import pytest
from kubernetes.client import CoreV1Api

from tests.conftest import K8s
from tests.infra import images, k8s_build, node_cgroups, node_host, node_runtime
from tests.infra import node as node_infra
from tests.infra.kafka import POD_SUBNET

HOST_SYSCTLS = (*node_runtime.KUBELET_SYSCTLS, node_infra.IP_FORWARD)
PYTHON_IMAGE = images.KAFLEET_IMAGE  # Debian's python3 on the test bed's own base image

# The first test to ask for the real node builds nothing (make test built the images first)
# but starts the node, imports the images and installs the chart: minutes on a busy machine.
pytestmark = pytest.mark.timeout(900)


def _pod(name: str, image: str, command: list[str] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": image, "imagePullPolicy": "Never"}
    if command:
        container["command"] = command
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {node_runtime.REAL_NODE_LABEL: "true"},
            "tolerations": [
                {"key": node_runtime.REAL_NODE_LABEL, "operator": "Exists", "effect": "NoSchedule"}
            ],
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [container],
        },
    }


def _run_pod(
    node: node_infra.RealNode, k8s: K8s, namespace: str, pod: dict[str, Any], phases: set[str]
) -> Any:
    """Create ``pod`` and wait until it reaches one of ``phases``; return it."""
    k8s.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(pod))
    api, name = CoreV1Api(k8s.api), pod["metadata"]["name"]
    deadline = time.monotonic() + 60
    found: Any = api.read_namespaced_pod(name, namespace)
    while found.status.phase not in phases:
        if time.monotonic() > deadline:
            events = k8s.kubectl("get", "events", "-n", namespace, check=False)
            raise AssertionError(
                f"pod {name} stayed {found.status.phase}:\n{events}\n{node.standing()}"
            )
        time.sleep(0.2)
        found = api.read_namespaced_pod(name, namespace)
    return found


def _runc_state(node: node_infra.RealNode, container_id: str) -> dict[str, Any]:
    root = node.workdir / "containerd" / "run" / "runc" / "k8s.io"  # bound over /run/containerd
    done = subprocess.run(
        ["runc", f"--root={root}", "state", container_id], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    state: dict[str, Any] = json.loads(done.stdout)
    return state


def test_the_node_becomes_ready_with_its_taint_and_label(
    real_node: node_infra.RealNode, k8s: K8s
) -> None:
    node: Any = CoreV1Api(k8s.api).read_node(node_runtime.NODE_NAME)

    ready = [c.status for c in node.status.conditions if c.type == "Ready"]
    assert ready == ["True"]
    assert node.metadata.labels[node_runtime.REAL_NODE_LABEL] == "true"
    taints = [(t.key, t.value, t.effect) for t in node.spec.taints or []]
    assert (node_runtime.REAL_NODE_LABEL, "true", "NoSchedule") in taints
    assert node.status.node_info.container_runtime_version.startswith("containerd://")
    assert node.status.node_info.kubelet_version == k8s_build.K8S_VERSION


def test_the_kubelet_never_puts_the_node_under_disk_pressure_nor_deletes_its_images(
    real_node: node_infra.RealNode, k8s: K8s
) -> None:
    """A disk's thresholds are shares of the whole disk: on a large, nearly full disk the node
    would be tainted (no pod scheduled) and its imported images deleted, never pulled back.
    The running kubelet, asked through the apiserver, has memory's threshold and no disk's."""
    configz = json.loads(
        k8s.kubectl("get", "--raw", f"/api/v1/nodes/{node_runtime.NODE_NAME}/proxy/configz")
    )["kubeletconfig"]

    disk = {k: v for k, v in configz["evictionHard"].items() if not k.startswith("memory")}
    assert set(disk.values()) <= {"0%"}  # "0%": no threshold (kubelet's eviction helpers)
    assert set(disk) >= {"nodefs.available", "imagefs.available"}  # else defaults apply
    assert configz["imageGCHighThresholdPercent"] == 100
    assert "node.kubernetes.io/disk-pressure" not in real_node.standing()


def test_a_pod_that_tolerates_the_taint_runs_in_a_real_runc_container(
    real_node: node_infra.RealNode, k8s: K8s, namespace: str
) -> None:
    pod = _run_pod(real_node, k8s, namespace, _pod("pause", node_runtime.PAUSE_IMAGE), {"Running"})

    assert pod.spec.node_name == node_runtime.NODE_NAME
    assert ipaddress.ip_address(pod.status.pod_ip) in ipaddress.ip_network(POD_SUBNET)
    runtime, container_id = pod.status.container_statuses[0].container_id.split("://")
    assert runtime == "containerd"
    state = _runc_state(real_node, container_id)
    assert state["status"] == "running"
    assert state["pid"] in node_cgroups.pids(node_runtime.CGROUP_ROOT)


def test_the_kubernetes_service_routes_a_pods_traffic_to_the_apiserver(
    real_node: node_infra.RealNode, k8s: K8s, namespace: str
) -> None:
    """From inside a pod's network namespace (the host's python, entered with nsenter), the
    Service's address answers with the apiserver's TLS certificate and its version."""
    pod = _run_pod(real_node, k8s, namespace, _pod("netns", node_runtime.PAUSE_IMAGE), {"Running"})
    container_id = pod.status.container_statuses[0].container_id.split("://")[1]
    pid = _runc_state(real_node, container_id)["pid"]
    script = (
        "import json, ssl, sys, urllib.request\n"
        "context = ssl.create_default_context(cafile=sys.argv[1])\n"
        "with urllib.request.urlopen(sys.argv[2], context=context, timeout=10) as r:\n"
        "    print(json.load(r)['gitVersion'])\n"
    )
    ca = k8s.plane.workdir / "pki" / "ca.crt"
    url = f"https://{node_runtime.SERVICE_IP}:443/version"
    done = subprocess.run(
        ["nsenter", "-t", str(pid), "-n", "--", sys.executable, "-c", script, str(ca), url],
        capture_output=True,
        text=True,
        timeout=30,
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == k8s_build.K8S_VERSION
    assert node_host.service_routed(node_runtime.SERVICE_IP)


def test_a_python_pod_reaches_the_apiserver_with_its_in_cluster_configuration(
    real_node: node_infra.RealNode, k8s: K8s, namespace: str
) -> None:
    """What the operator does as a pod: the Service's address from the environment, the
    ServiceAccount's token and CA from the files the kubelet mounts."""
    assert real_node.has_image(PYTHON_IMAGE), (
        f"the session's node has no {PYTHON_IMAGE}; {real_node.standing()}"
    )
    script = (
        "import os, ssl, urllib.request\n"
        "sa = '/var/run/secrets/kubernetes.io/serviceaccount/'\n"
        "host = os.environ['KUBERNETES_SERVICE_HOST']\n"
        "port = os.environ['KUBERNETES_SERVICE_PORT']\n"
        "request = urllib.request.Request(f'https://{host}:{port}/api', headers={\n"
        "    'Authorization': 'Bearer ' + open(sa + 'token').read()})\n"
        "context = ssl.create_default_context(cafile=sa + 'ca.crt')\n"
        "with urllib.request.urlopen(request, context=context, timeout=10) as response:\n"
        "    print(host, port, response.status)\n"
    )
    pod = _pod("in-cluster", PYTHON_IMAGE, ["python3", "-c", script])

    found = _run_pod(real_node, k8s, namespace, pod, {"Succeeded", "Failed"})

    log = k8s.kubectl("logs", "-n", namespace, "in-cluster")  # through the kubelet, by its IP
    assert found.status.phase == "Succeeded", log
    assert log.split() == [node_runtime.SERVICE_IP, "443", "200"]


def test_the_hosts_sysctls_stay_as_they_were_while_the_node_sees_its_own(
    real_node: node_infra.RealNode, host_sysctls: dict[str, str]
) -> None:
    now = {name: node_host.read_sysctl(name) for name in node_runtime.KUBELET_SYSCTLS}
    holder = str(real_node.pids["holder"])
    paths = [f"/proc/sys/{name}" for name in node_runtime.KUBELET_SYSCTLS]
    inside = subprocess.run(
        ["nsenter", "-t", holder, "-m", "--", "cat", *paths], capture_output=True, text=True
    ).stdout.split()

    assert now == {name: host_sysctls[name] for name in node_runtime.KUBELET_SYSCTLS}
    assert inside == list(node_runtime.KUBELET_SYSCTLS.values())
