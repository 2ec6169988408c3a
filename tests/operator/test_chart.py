"""The chart's defaults follow the release: its appVersion is kafleet's version, the operator's
image is ``kafleet:<appVersion>`` unless the values say otherwise, and the operator's pod runs
``kafleet operator`` once (the image's entrypoint is ``kafleet`` too) as the image's user. Its
RBAC grants exactly the verbs the operator and kopf use, and a ``watchNamespaces`` entry that
is not a namespace's name (a pattern, a list) fails the install naming it, instead of
rendering a RoleBinding into a namespace that cannot exist."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
import yaml

import kafleet
from tests.conftest import REPO
from tests.infra import k8s_build

CHART = REPO / "charts" / "kafleet"


def _operator_pod(*sets: str) -> dict[str, Any]:
    rendered = subprocess.run(
        [str(k8s_build.BIN / "helm"), "template", "kafleet", str(CHART), *sets],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (deployment,) = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Deployment"]
    spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return spec


def test_the_charts_app_version_is_kafleets_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())

    assert chart["appVersion"] == kafleet.__version__


def test_the_operator_image_defaults_to_kafleet_at_the_app_version() -> None:
    (container,) = _operator_pod()["containers"]

    assert container["image"] == f"kafleet:{kafleet.__version__}"
    assert container["imagePullPolicy"] == "IfNotPresent"


def test_a_registry_and_a_tag_from_the_values_name_the_image() -> None:
    pod = _operator_pod("--set", "image.repository=registry.example.com/kafleet")
    tagged = _operator_pod("--set", "image.repository=r.example/kafleet", "--set", "image.tag=9")

    assert pod["containers"][0]["image"] == f"registry.example.com/kafleet:{kafleet.__version__}"
    assert tagged["containers"][0]["image"] == "r.example/kafleet:9"


def test_the_operator_runs_kafleet_operator_once_as_the_images_user() -> None:
    pod = _operator_pod()
    (container,) = pod["containers"]

    assert [*container["command"], container["args"][0]] == ["kafleet", "operator"]
    assert pod["securityContext"]["runAsUser"] == 65532
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


def _render(*sets: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(k8s_build.BIN / "helm"), "template", "kafleet", str(CHART), "-n", "ops", *sets],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize("pattern", ["team-*", "shop,billing", "!kube-system", "Shop"])
def test_a_watch_namespace_that_is_not_a_namespace_name_is_refused_naming_it(
    pattern: str,
) -> None:
    done = _render("--set-json", f"watchNamespaces={json.dumps([pattern])}")

    assert done.returncode != 0
    assert f'watchNamespaces: "{pattern}" is not a namespace name' in done.stderr
    assert "leave watchNamespaces empty" in done.stderr


def _rules(*sets: str) -> dict[str, set[tuple[str, str, str]]]:
    """Each ClusterRole's and Role's grants as (apiGroup, resource, verb) triples."""
    done = _render(*sets)
    assert done.returncode == 0, done.stderr
    roles = [
        d for d in yaml.safe_load_all(done.stdout) if d and d["kind"] in ("ClusterRole", "Role")
    ]
    return {
        role["metadata"]["name"].removeprefix("kafleet-operator-"): {
            (group, resource, verb)
            for rule in role["rules"]
            for group in rule["apiGroups"]
            for resource in rule["resources"]
            for verb in rule["verbs"]
        }
        for role in roles
    }


def _grants(group: str, resources: str, verbs: str) -> set[tuple[str, str, str]]:
    return {(group, r, v) for r in resources.split() for v in verbs.split()}


# Every verb and the call that needs it: kopf's watches (list, watch) of the CRDs, namespaces,
# ConsumerGroups and the objects they own; kopf's patches of a ConsumerGroup (its diff-base
# annotation, finalizer removal, status.kopf); the operator's server-side applies (patch, and
# create when the object is new), its reads before them (get: whose is it?), of a group before
# putting a deleted object back (get) and of the Secrets a spec names; the watch of the pods
# (list, watch: their sidecars' addresses); the deletion of a metrics Service an older operator
# made with a cluster IP; the status and scale patches; Events (core v1, as kopf posts them);
# and update on finalizers for blockOwnerDeletion. In the release's namespace, with shards >= 1
# (reconcile/elector.py): the shards' and members' Leases listed all at once each step (list),
# taken and renewed with their resourceVersion (create, update), and deleted as a pod leaves or
# once a gone pod's member Lease is old (delete); get reads nothing that list does not.
USED = {
    "discovery": _grants("apiextensions.k8s.io", "customresourcedefinitions", "list watch")
    | _grants("", "namespaces", "list watch"),
    "consumergroups": _grants("kafleet.io", "consumergroups", "get list watch patch")
    | _grants("kafleet.io", "consumergroups/status consumergroups/scale", "patch")
    | _grants("kafleet.io", "consumergroups/finalizers", "update")
    | _grants("", "events", "create"),
    "workloads": _grants("apps", "deployments", "get list watch create patch")
    | _grants("", "configmaps", "get list watch create patch")
    | _grants("", "services", "get list watch create patch delete")
    | _grants("", "pods", "list watch")
    | _grants("", "secrets", "get"),
    "leases": _grants("coordination.k8s.io", "leases", "get list create update delete"),
}


def test_the_chart_grants_exactly_the_verbs_the_operator_and_kopf_use() -> None:
    assert _rules() == USED
    assert _rules("--set", "watchNamespaces={shop}") == USED
    unsharded = {role: grants for role, grants in USED.items() if role != "leases"}
    assert _rules("--set", "replicas=1", "--set", "shards=0") == unsharded
