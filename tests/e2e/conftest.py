"""Fixtures of the end-to-end tests: the fleet as a user runs it, on a node that runs containers.

Owns: the cluster the tests use (``fleet_cluster``): by default the session's control plane with
the real node attached (kubelet, containerd, runc: ``tests/infra/node.py``) and the project's
images built from its own Dockerfile and imported (``tests/infra/images.py``); with
``KAFLEET_E2E_KUBECONFIG`` set, a cluster of the user's (``make kind-e2e``), with the images
already loaded. Also the operator installed from the chart with ``helm install`` (``operator``,
one release per session: the chart's ClusterRoles have fixed names), the namespace it watches
(``fleet_namespace``), and the broker's address as pods see it (``pod_kafka``).

Does not own the test bed's parts (``tests/infra/``) nor the checks (the test modules).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, K8s
from tests.e2e import monitors
from tests.e2e.fleet import Cluster, Images
from tests.infra import prometheus
from tests.infra.kafka import KafkaBroker
from tests.infra.node import RealNode

# A user's own cluster instead of the test bed's (make kind-e2e), and how its pods reach the
# host's test broker.
EXTERNAL_KUBECONFIG = os.environ.get("KAFLEET_E2E_KUBECONFIG", "")
NODE_LABEL = "kafleet.io/real-node"
# Pods of the end-to-end tests go to the real node, never to kwok's fake ones (and the real
# node's taint keeps every other test's pods off it).
ON_REAL_NODE: dict[str, Any] = {
    "nodeSelector": {NODE_LABEL: "true"},
    "tolerations": [{"key": NODE_LABEL, "operator": "Exists", "effect": "NoSchedule"}],
}


@pytest.fixture(scope="session")
def fleet_cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """The test bed's control plane with the real node and the project's images on it, or
    the cluster ``KAFLEET_E2E_KUBECONFIG`` names."""
    if EXTERNAL_KUBECONFIG:
        version = _version()
        yield Cluster(
            Path(EXTERNAL_KUBECONFIG),
            Images(
                f"kafleet:{version}",
                f"kafleet-spark:{version}",
                f"kafleet-examples:{version}",
                f"kafleet-examples-spark:{version}",
                "IfNotPresent",
            ),
            placement={},
        )
        return
    from tests.infra import images

    node: RealNode = request.getfixturevalue("real_node")
    k8s: K8s = request.getfixturevalue("k8s")
    yield Cluster(
        k8s.kubeconfig,
        Images(
            images.KAFLEET_IMAGE,
            images.SPARK_IMAGE,
            images.EXAMPLES_IMAGE,
            images.EXAMPLES_SPARK_IMAGE,
            "Never",
        ),
        placement=ON_REAL_NODE,
        standing=node.standing,
    )


def restricted(cluster: Cluster, namespace: str) -> None:
    """Have the apiserver's PodSecurity admission refuse, in ``namespace``, any pod that breaks
    the Restricted profile: non-root, no privilege escalation, all capabilities dropped, the
    runtime's seccomp profile, and only the harmless volume types."""
    cluster.kubectl(
        "label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted"
    )


def _version() -> str:
    from kafleet import __version__

    return __version__


@pytest.fixture(scope="session")
def pod_kafka(kafka_broker: KafkaBroker) -> str:
    """The broker's bootstrap address as pods reach it (its listener for pods, advertised at the
    pod bridge's gateway, or at ``KAFLEET_E2E_BROKER_HOST`` on a user's cluster)."""
    return kafka_broker.pods_bootstrap


@pytest.fixture(scope="session")
def fleet_namespace(fleet_cluster: Cluster) -> Iterator[str]:
    """The namespace whose ConsumerGroups the chart's operator manages."""
    name = f"e2e-fleet-{os.getpid()}"
    fleet_cluster.kubectl("create", "namespace", name)
    restricted(fleet_cluster, name)
    fleet_cluster.kubectl(
        "wait", "--for=create", "serviceaccount/default", "-n", name, "--timeout=30s"
    )
    yield name
    fleet_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@dataclass(frozen=True)
class Release:
    name: str
    namespace: str
    watched: str


@pytest.fixture(scope="session")
def operator(
    fleet_cluster: Cluster, fleet_namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Release]:
    """``helm install`` of the chart with the built image: the operator runs as a pod, with the
    chart's RBAC and its in-cluster configuration, watching ``fleet_namespace``."""
    release = Release("kafleet", f"kafleet-system-{os.getpid()}", fleet_namespace)
    repository, _, tag = fleet_cluster.images.kafleet.rpartition(":")
    assert tag == _version(), "the images are tagged with kafleet's version, the chart's appVersion"
    fleet_cluster.kubectl("create", "namespace", release.namespace)
    restricted(fleet_cluster, release.namespace)
    # Every switch on, as a platform team with the Prometheus Operator installs it: the
    # ServiceMonitors, the PrometheusRule and the dashboards' ConfigMaps go in with the rest.
    crds = prometheus.operator_crds()
    for crd in crds:
        fleet_cluster.kubectl("apply", "--server-side", "-f", str(crd))
    fleet_cluster.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s",
        *(f"crd/{c.stem.split('_')[1]}.monitoring.coreos.com" for c in crds),
    )  # fmt: skip
    values = {
        # The tag is left to the chart: its appVersion.
        "image": {"repository": repository, "pullPolicy": fleet_cluster.images.pull_policy},
        "watchNamespaces": [fleet_namespace],
        "intervalSeconds": 2,
        "metrics": {"serviceMonitor": {"enabled": True}},
        "prometheusRule": {"enabled": True},
        "grafana": {"dashboards": {"enabled": True}},
        **fleet_cluster.placement,
    }
    values_file = tmp_path_factory.mktemp("helm") / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    fleet_cluster.helm(
        "install",
        release.name,
        str(REPO / "charts" / "kafleet"),
        "-n",
        release.namespace,
        "-f",
        str(values_file),
        "--wait",
        "--timeout=180s",
    )
    try:
        yield release
    finally:
        fleet_cluster.helm("uninstall", release.name, "-n", release.namespace, "--wait")
        fleet_cluster.kubectl("delete", "namespace", release.namespace, "--wait=false")


@pytest.fixture
def fleet_prometheus(
    fleet_cluster: Cluster, operator: Release, tmp_path: Path
) -> Iterator[prometheus.Prometheus]:
    """A Prometheus scraping what the chart's ServiceMonitors select, every 2 s, and
    evaluating the rules of the chart's PrometheusRule, both read back from the apiserver."""
    found = fleet_cluster.json("get", "servicemonitors", "-n", operator.namespace)["items"]
    assert sorted(m["metadata"]["name"] for m in found) == [
        f"{operator.name}-operator",
        f"{operator.name}-workers",
    ]
    (rule,) = fleet_cluster.json("get", "prometheusrules", "-n", operator.namespace)["items"]
    rule_file = tmp_path / "kafleet.rules.yaml"
    rule_file.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    server = prometheus.start_prometheus(
        tmp_path / "prometheus",
        [],
        scrape_configs=monitors.scrape_configs(found, fleet_cluster.kubeconfig, "2s"),
        program=prometheus.k8s_sd_binary(),
        rule_files=[rule_file],
    )
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module", autouse=True)
def _groups_deleted_after_the_module(request: pytest.FixtureRequest) -> Iterator[None]:
    """A module of fleet tests that fails before it deletes its ConsumerGroups has them deleted
    after it (their workers then drain in their grace, as a deleted group's do), so none runs
    on beside the next modules. After the module, not each test: a module's fixture may hold a
    group for several."""
    tests = [t for t in request.session.items if isinstance(t, pytest.Function)]
    if not any(t.module is request.module and "operator" in t.fixturenames for t in tests):
        yield
        return
    # Asked before the module's tests, not at its teardown (pytest deprecates that).
    release: Release = request.getfixturevalue("operator")
    cluster: Cluster = request.getfixturevalue("fleet_cluster")
    yield
    cluster.kubectl("delete", "kcg", "--all", "-n", release.watched, "--wait=false", check=False)
