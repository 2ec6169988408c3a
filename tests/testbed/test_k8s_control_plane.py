"""The Kubernetes test bed works: a real apiserver with schema validation, RBAC, controllers that
turn Deployments into Pods, kwok that runs them and keeps its nodes' Leases renewed (so they
stay Ready however long a test runs), server-side dry-run, and helm."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime
from pathlib import Path

import pytest
from kubernetes import watch
from kubernetes.client import AppsV1Api, CoordinationV1Api, CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from tests.conftest import K8s
from tests.infra import k8s as k8s_infra
from tests.infra import k8s_build, pki
from tests.infra.waiting import wait_until

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.testbed.kafleet.io"},
    "spec": {
        "group": "testbed.kafleet.io",
        "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["size"],
                                "properties": {
                                    "size": {"type": "integer", "minimum": 1, "maximum": 10},
                                    "colour": {"type": "string", "enum": ["red", "blue"]},
                                },
                                "x-kubernetes-validations": [
                                    {
                                        "rule": "self.size <= 5 || self.colour == 'red'",
                                        "message": "widgets larger than 5 must be red",
                                    }
                                ],
                            }
                        },
                    }
                },
                "subresources": {"status": {}},
            }
        ],
    },
}


@pytest.fixture(scope="module")
def widget_crd(k8s: K8s) -> str:
    k8s.kubectl("apply", "-f", "-", input=json.dumps(CRD))
    k8s.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", "crd/" + CRD["metadata"]["name"]
    )  # type: ignore[index]
    return "widgets.testbed.kafleet.io"


def test_kubectl_and_the_apiserver_report_the_pinned_kubernetes_version(k8s: K8s) -> None:
    versions = json.loads(k8s.kubectl("version", "-o", "json"))

    assert versions["serverVersion"]["gitVersion"] == k8s_build.K8S_VERSION
    assert versions["clientVersion"]["gitVersion"] == k8s_build.K8S_VERSION


def test_fake_nodes_are_ready(k8s: K8s) -> None:
    nodes = CoreV1Api(k8s.api).list_node(label_selector="type=kwok").items

    assert sorted(n.metadata.name for n in nodes) == ["kwok-node-0", "kwok-node-1"]
    for node in nodes:
        ready = {c.type: c.status for c in node.status.conditions}["Ready"]
        assert ready == "True"


def lease_renewals(k8s: K8s) -> dict[str, datetime]:
    """Each fake node's Lease in kube-node-lease: when it was last renewed."""
    leases = CoordinationV1Api(k8s.api).list_namespaced_lease("kube-node-lease").items
    return {
        lease.metadata.name: lease.spec.renew_time
        for lease in leases
        if lease.metadata.name in k8s_infra.FAKE_NODES and lease.spec.renew_time
    }


def test_each_fake_node_has_a_lease_that_kwok_renews(k8s: K8s) -> None:
    """The node controller judges a node by its Lease: without one renewed, it marks the node
    NotReady after its grace period and every pod on it unready."""
    wait_until(
        lambda: sorted(lease_renewals(k8s)) == sorted(k8s_infra.FAKE_NODES),
        30,
        "a Lease per fake node in kube-node-lease",
    )
    first = lease_renewals(k8s)

    wait_until(
        lambda: all(lease_renewals(k8s)[n] > first[n] for n in k8s_infra.FAKE_NODES),
        3 * k8s_infra.NODE_LEASE_S,
        "kwok to renew each node's Lease",
    )


def test_fake_nodes_stay_ready_past_the_node_controllers_grace_period(k8s: K8s) -> None:
    """Watched, not sampled: a node the controller marks Unknown is set Ready again by kwok
    within a moment, but its pods were marked unready meanwhile."""
    core = CoreV1Api(k8s.api)
    # Longer than the grace period plus the node controller's own period (5 s), from now:
    # whenever the last heartbeat before this test was, a node without one would be caught.
    window = k8s_infra.NODE_MONITOR_GRACE_S + 10
    seen: list[str] = []
    for event in watch.Watch().stream(
        core.list_node, label_selector="type=kwok", timeout_seconds=window
    ):
        node = event["object"]
        ready = {c.type: c for c in node.status.conditions}["Ready"]
        seen.append(f"{node.metadata.name} Ready={ready.status} ({ready.reason})")
        taints = [t.key for t in node.spec.taints or []]
        assert ready.status == "True", seen
        assert "node.kubernetes.io/unreachable" not in taints, seen


def test_a_custom_resource_is_stored_and_a_malformed_one_is_rejected_naming_the_field(
    k8s: K8s, widget_crd: str, namespace: str
) -> None:
    api = CustomObjectsApi(k8s.api)

    def widget(name: str, spec: dict[str, object]) -> dict[str, object]:
        return {
            "apiVersion": "testbed.kafleet.io/v1",
            "kind": "Widget",
            "metadata": {"name": name},
            "spec": spec,
        }

    api.create_namespaced_custom_object(
        "testbed.kafleet.io", "v1", namespace, "widgets", widget("good", {"size": 3})
    )
    stored = api.get_namespaced_custom_object(
        "testbed.kafleet.io", "v1", namespace, "widgets", "good"
    )
    assert stored["spec"] == {"size": 3}

    rejections = {
        "spec.size": {"size": 0},
        "spec.colour": {"size": 2, "colour": "green"},
        "widgets larger than 5 must be red": {"size": 7, "colour": "blue"},
    }
    for expected, spec in rejections.items():
        with pytest.raises(ApiException) as caught:
            api.create_namespaced_custom_object(
                "testbed.kafleet.io", "v1", namespace, "widgets", widget("bad", spec)
            )
        assert caught.value.status == 422
        assert expected in json.loads(caught.value.body)["message"]


def test_a_deployment_of_two_replicas_gets_two_running_ready_pods_and_deleting_it_removes_them(
    k8s: K8s, namespace: str
) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "example.invalid/web:1"}]},
            },
        },
    }
    k8s.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(deployment))
    apps, core = AppsV1Api(k8s.api), CoreV1Api(k8s.api)

    wait_until(
        lambda: (apps.read_namespaced_deployment("web", namespace).status.ready_replicas or 0) == 2,
        60,
        "2 ready replicas",
    )
    pods = core.list_namespaced_pod(namespace, label_selector="app=web").items
    assert len(pods) == 2
    assert all(p.status.phase == "Running" for p in pods)
    assert {p.spec.node_name for p in pods} <= {"kwok-node-0", "kwok-node-1"}

    apps.delete_namespaced_deployment("web", namespace)
    wait_until(
        lambda: not core.list_namespaced_pod(namespace, label_selector="app=web").items,
        60,
        "the garbage collector to remove the pods",
    )


def test_server_side_dry_run_validates_without_creating(k8s: K8s, namespace: str) -> None:
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "dry"},
        "data": {"a": "1"},
    }

    out = k8s.kubectl(
        "apply", "--dry-run=server", "-n", namespace, "-f", "-", input=json.dumps(config_map)
    )

    assert "configmap/dry created (server dry run)" in out
    assert k8s.kubectl("get", "configmap", "dry", "-n", namespace, check=False) == ""


def test_rbac_forbids_a_service_account_what_it_was_not_granted(k8s: K8s, namespace: str) -> None:
    k8s.kubectl("create", "serviceaccount", "reader", "-n", namespace)
    token = k8s.kubectl("create", "token", "reader", "-n", namespace).strip()

    def as_reader(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                str(k8s_build.BIN / "kubectl"),
                f"--kubeconfig={k8s.kubeconfig}",
                f"--token={token}",
                "-n",
                namespace,
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    denied = as_reader("get", "configmaps")
    assert denied.returncode != 0
    assert "forbidden" in denied.stderr

    k8s.kubectl(
        "create", "role", "read-cm", "--verb=get,list", "--resource=configmaps", "-n", namespace
    )
    k8s.kubectl(
        "create",
        "rolebinding",
        "read-cm",
        "--role=read-cm",
        f"--serviceaccount={namespace}:reader",
        "-n",
        namespace,
    )
    wait_until(lambda: as_reader("get", "configmaps").returncode == 0, 30, "the role to apply")


def test_helm_template_of_a_chart_applies(k8s: K8s, namespace: str, tmp_path: Path) -> None:
    chart = tmp_path / "hello"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: hello\nversion: 0.1.0\n")
    (chart / "values.yaml").write_text("greeting: hello\n")
    (chart / "templates" / "configmap.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-greeting\n"
        "data:\n  greeting: {{ .Values.greeting | quote }}\n"
    )
    rendered = subprocess.run(
        [str(k8s_build.BIN / "helm"), "template", "demo", str(chart), "--set", "greeting=hi"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout

    k8s.kubectl("apply", "-n", namespace, "-f", "-", input=rendered)

    data = CoreV1Api(k8s.api).read_namespaced_config_map("demo-greeting", namespace).data
    assert data == {"greeting": "hi"}


def test_the_service_range_holds_thousands_of_services_beside_the_kubernetes_one(
    k8s: K8s, namespace: str
) -> None:
    """A /16: the operator makes a Service per ConsumerGroup, and a thousand groups must fit
    (a /24 holds 254)."""
    core = CoreV1Api(k8s.api)
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "far"},
        "spec": {"clusterIP": "10.0.200.10", "ports": [{"port": 80}]},
    }

    k8s.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(service))

    assert core.read_namespaced_service("far", namespace).spec.cluster_ip == "10.0.200.10"
    kubernetes = core.read_namespaced_service("kubernetes", "default").spec.cluster_ip
    assert kubernetes == pki.KUBERNETES_SERVICE_IP


def test_the_apiserver_publishes_the_front_proxys_ca_for_aggregated_apis(k8s: K8s) -> None:
    """What an aggregated API server (KEDA's metrics adapter) reads to trust the apiserver's
    proxied requests."""
    data = (
        CoreV1Api(k8s.api)
        .read_namespaced_config_map("extension-apiserver-authentication", "kube-system")
        .data
    )

    assert "BEGIN CERTIFICATE" in data["requestheader-client-ca-file"]
    assert json.loads(data["requestheader-allowed-names"]) == [pki.FRONT_PROXY_CLIENT]
    assert json.loads(data["requestheader-username-headers"]) == ["X-Remote-User"]
