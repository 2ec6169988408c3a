"""The Helm chart's least-privilege RBAC is enough: an operator running as the chart's service
account, with a token and nothing else, reconciles a ConsumerGroup to Ready and reads its lag
with the password from the Secret its spec names; the same account may only get Secrets (not
list them) and only in its watched namespace, nor touch Deployments outside it; it watches
what it owns (a deleted Deployment is put back), keeps its shard's Lease in its own namespace
and no request of it is forbidden; with
``watchNamespaces`` set it may not touch ConsumerGroups (nor their status and scale) anywhere
else either."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

from tests.conftest import REPO, K8s, TopicFactory
from tests.infra import k8s_build
from tests.infra.kafka import SaslListener
from tests.infra.waiting import wait_until
from tests.operator.conftest import Operator, apply_ready, get
from tests.operator.test_kafka_security import put_secret, sasl_group, wait_degraded


def test_the_operator_runs_on_the_charts_rbac_alone(
    k8s: K8s,
    namespace: str,
    kafka_sasl: SaslListener,
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
            release,  # the release names its cluster-wide roles: no clash with another's
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
    assert may("get", "secrets", "-n", namespace)  # those a ConsumerGroup names
    assert not may("list", "secrets", "-n", namespace)
    assert not may("get", "secrets", "-n", release)
    assert not may("patch", "deployments", "-n", release)  # outside the watched namespace
    assert not may("delete", "deployments", "-n", namespace)  # owner references do that

    topic = topic_factory(partitions=2)
    put_secret(k8s, namespace, kafka_sasl.password)
    assert may("update", "leases.coordination.k8s.io", "-n", release)  # the shards', as the chart
    assert not may("update", "leases.coordination.k8s.io", "-n", namespace)
    # As the chart runs it: a shard's Lease in its own namespace.
    sharded = ["--shards", "1", "--lease-namespace", release, "--identity", "op-0"]
    op = Operator(k8s, namespace, tmp_path / "operator.log", "http://{pod_ip}:8080", sharded)
    op.k8s = K8s(kubeconfig, k8s.api, k8s.plane)
    op.start()
    try:
        apply_ready(k8s, namespace, sasl_group("least", kafka_sasl, topic, replicas=2))
        wait_degraded(k8s, namespace, "least", "Observed")  # the lag was read over SASL
        # The owned objects are watched (list, watch) and a deleted one is put back.
        before = get(k8s, namespace, "deployment", "least")["metadata"]["uid"]
        k8s.kubectl("delete", "-n", namespace, "deployment", "least", "--wait=true")
        wait_until(
            lambda: (
                k8s.kubectl(
                    "get", "-n", namespace, "deployment", "least", "-o", "name", check=False
                ).strip()
                and get(k8s, namespace, "deployment", "least")["metadata"]["uid"] != before
            ),
            10,
            "the deleted Deployment put back",
            every=0.5,
        )
        log = (tmp_path / "operator.log").read_text()
        assert "forbidden" not in log.lower(), log[-3000:]  # kopf warns of a missing grant
    finally:
        op.stop()
        k8s.kubectl("delete", "namespace", release, "--wait=false", check=False)


def render_chart(release: str, *values: str) -> list[dict[str, object]]:
    """``helm template`` of the chart into ``release``, without the operator's Deployment."""
    sets = [arg for value in values for arg in ("--set", value)]
    chart = str(REPO / "charts" / "kafleet")
    rendered = subprocess.run(
        [str(k8s_build.BIN / "helm"), "template", release, chart, "-n", release, *sets],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [doc for doc in yaml.safe_load_all(rendered) if doc and doc["kind"] != "Deployment"]


def test_with_watch_namespaces_the_operator_may_touch_consumer_groups_only_there(
    k8s: K8s, namespace: str, crd: str
) -> None:
    release, other = f"{namespace[:50]}-op", f"{namespace[:50]}-b"
    for created in (release, other):
        k8s.kubectl("create", "namespace", created)
    try:
        k8s.kubectl(
            "apply",
            "-f",
            "-",
            input=yaml.safe_dump_all(render_chart(release, f"watchNamespaces={{{namespace}}}")),
        )
        operator = f"--as=system:serviceaccount:{release}:kafleet-operator"

        def may(verb: str, what: str, *where: str) -> bool:
            done = k8s.kubectl("auth", "can-i", operator, verb, what, *where, check=False)
            return done.strip() == "yes"

        for what in ("consumergroups.kafleet.io", "consumergroups.kafleet.io/status"):
            assert may("patch", what, "-n", namespace), what
            assert not may("patch", what, "-n", other), what
        assert may("patch", "consumergroups.kafleet.io/scale", "-n", namespace)
        assert not may("patch", "consumergroups.kafleet.io/scale", "-n", other)
        assert may("watch", "consumergroups.kafleet.io", "-n", namespace)
        assert not may("list", "consumergroups.kafleet.io", "--all-namespaces")
        assert not may("create", "events", "-n", other)
        # kopf's reads of the cluster's shape (see the chart's rbac.yaml): nothing of a group.
        assert may("watch", "customresourcedefinitions.apiextensions.k8s.io")
    finally:
        for created in (release, other):
            k8s.kubectl("delete", "namespace", created, "--wait=false", check=False)
