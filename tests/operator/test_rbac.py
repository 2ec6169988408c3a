"""The Helm chart's least-privilege RBAC is enough: an operator running as the chart's service
account, with a token and nothing else, reconciles a ConsumerGroup to Ready; the same account
may not read Secrets, nor touch Deployments outside its watched namespace."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

from tests.conftest import REPO, K8s, TopicFactory
from tests.infra import k8s_build
from tests.operator.conftest import Operator, apply_ready, consumer_group


def test_the_operator_runs_on_the_charts_rbac_alone(
    k8s: K8s,
    namespace: str,
    kafka: str,
    topic_factory: TopicFactory,
    crd: str,
    tmp_path: Path,
) -> None:
    release = f"{namespace[:50]}-op"
    k8s.kubectl("create", "namespace", release)
    rendered = subprocess.run(
        [
            str(k8s_build.BIN / "helm"),
            "template",
            "kafleet",
            str(REPO / "charts" / "kafleet"),
            "-n",
            release,
            "--set",
            f"watchNamespaces={{{namespace}}}",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rbac = [
        doc
        for doc in yaml.safe_load_all(rendered)
        if doc and doc["kind"] != "Deployment"  # the operator itself runs here, as a process
    ]
    k8s.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(rbac))
    token = k8s.kubectl("create", "token", "kafleet-operator", "-n", release).strip()
    kubeconfig = tmp_path / "operator.kubeconfig"
    shutil.copy(k8s.kubeconfig, kubeconfig)
    as_operator = [str(k8s_build.BIN / "kubectl"), f"--kubeconfig={kubeconfig}"]
    subprocess.run(
        [*as_operator, "config", "set-credentials", "op", f"--token={token}"], check=True
    )
    subprocess.run([*as_operator, "config", "set-context", "--current", "--user=op"], check=True)

    def may(*args: str) -> bool:
        done = subprocess.run(
            [*as_operator, "auth", "can-i", *args], capture_output=True, text=True, check=False
        )
        return done.stdout.strip() == "yes"

    assert may("patch", "deployments", "-n", namespace)
    assert may("patch", "consumergroups.kafleet.io/scale", "-n", namespace)
    assert not may("get", "secrets", "-n", namespace)
    assert not may("patch", "deployments", "-n", release)  # outside the watched namespace
    assert not may("delete", "deployments", "-n", namespace)  # owner references do that

    topic = topic_factory(partitions=2)
    op = Operator(k8s, namespace, tmp_path / "operator.log", "http://{pod_ip}:8080")
    op.k8s = K8s(kubeconfig, k8s.api, k8s.plane)
    op.start()
    try:
        apply_ready(k8s, namespace, consumer_group("least", kafka, topic, replicas=2))
    finally:
        op.stop()
        k8s.kubectl("delete", "namespace", release, "--wait=false", check=False)
