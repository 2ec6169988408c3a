"""The chart as a platform team installs it: ``helm lint`` clean, every value in
``values.schema.json`` with a description and nothing else there (a misspelled value fails the
install naming it), and with every switch on, objects the real apiserver accepts (server-side
dry run, with the Prometheus Operator's CRDs) carrying the chart's alerts and dashboards as the
repository has them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, K8s
from tests.infra import k8s_build, prometheus
from tests.monitoring import queries

CHART = REPO / "charts" / "kafleet"
SCHEMA = json.loads((CHART / "values.schema.json").read_text())
ALL_ON = [
    "--set", "metrics.serviceMonitor.enabled=true",
    "--set", "prometheusRule.enabled=true",
    "--set", "grafana.dashboards.enabled=true",
    "--set", "serviceAccount.annotations.team=data",
    "--set", "podAnnotations.team=data",
    "--set", "nodeSelector.kubernetes\\.io/os=linux",
    "--set-json", 'tolerations=[{"key":"dedicated","operator":"Exists","effect":"NoSchedule"}]',
    "--set-json", 'imagePullSecrets=[{"name":"regcred"}]',
    "--set", "priorityClassName=system-cluster-critical",
]  # fmt: skip


def _helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(k8s_build.BIN / "helm"), *args], capture_output=True, text=True, check=False
    )


def render(*sets: str, namespace: str = "ops") -> list[dict[str, Any]]:
    done = _helm("template", "kafleet", str(CHART), "-n", namespace, *sets)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def kinds(objects: list[dict[str, Any]]) -> list[str]:
    return sorted(o["kind"] for o in objects)


def test_helm_lint_passes_strict_with_the_defaults_and_with_every_switch_on() -> None:
    for sets in ([], ALL_ON):
        done = _helm("lint", "--strict", str(CHART), *sets)
        assert done.returncode == 0, done.stdout + done.stderr


def _leaves(values: dict[str, Any], schema: dict[str, Any], path: str = "") -> list[str]:
    """The values the schema does not describe, or describes without words."""
    wrong = []
    for key, value in values.items():
        where = f"{path}{key}"
        described = schema.get("properties", {}).get(key)
        if described is None or not described.get("description"):
            wrong.append(where)
        elif isinstance(value, dict) and described.get("additionalProperties") is False:
            wrong += _leaves(value, described, f"{where}.")
    return wrong


def test_every_value_is_in_the_schema_with_a_description_and_the_schema_has_no_other() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert _leaves(values, SCHEMA) == []
    assert set(SCHEMA["properties"]) - {"global"} == set(values)
    assert SCHEMA["additionalProperties"] is False


@pytest.mark.parametrize(
    ("sets", "named"),
    [
        (["--set", "imagee.tag=1"], "additional properties 'imagee' not allowed"),
        (["--set", "metrics.serviceMonitor.enable=true"], "'enable' not allowed"),
        (["--set", "grafana.dashboard.enabled=true"], "'dashboard' not allowed"),
        (["--set", "crds.instal=false"], "'instal' not allowed"),
        (["--set", "image.pullPolicy=Sometimes"], "/image/pullPolicy"),
        (["--set", "metrics.port=0"], "/metrics/port"),
        (["--set", "metrics.serviceMonitor.interval=30"], "/metrics/serviceMonitor/interval"),
        (["--set", "prometheusRule.disabledAlerts={KafleetRebalanceStrom}"], "disabledAlerts/0"),
        (["--set", "metrics.port=8080"], "/metrics/port"),
        (["--set", "metrics.serviceMonitor.interval=1.5s"], "/metrics/serviceMonitor/interval"),
        (["--set", "shards=-1"], "at '/shards': minimum"),
        (["--set-json", "shards=1.5"], "at '/shards': got number, want integer"),
        (["--set", "replicas=0"], "at '/replicas': minimum"),
        (
            [
                "--set",
                "metrics.serviceMonitor.enabled=true",
                "--set",
                "metrics.serviceMonitor.interval=5s",
            ],
            "scrapeTimeout 10s is longer than metrics.serviceMonitor.interval 5s",
        ),
    ],
)
def test_a_misspelled_or_wrong_value_is_refused_naming_it(sets: list[str], named: str) -> None:
    done = _helm("template", "kafleet", str(CHART), *sets)
    assert done.returncode != 0
    assert named in done.stderr, done.stderr


def test_the_alerts_a_user_may_disable_are_those_of_the_rule_file() -> None:
    allowed = SCHEMA["properties"]["prometheusRule"]["properties"]["disabledAlerts"]["items"]
    assert allowed["enum"] == [a.where.removeprefix("alert ") for a in queries.alerts()]


def test_the_operator_pod_carries_scrape_annotations_only_without_the_service_monitor() -> None:
    def annotations(*sets: str) -> dict[str, str]:
        (deployment,) = [o for o in render(*sets) if o["kind"] == "Deployment"]
        found: dict[str, str] = deployment["spec"]["template"]["metadata"].get("annotations", {})
        return found

    assert annotations()["prometheus.io/port"] == "8081"
    assert "prometheus.io/scrape" not in annotations("--set", "metrics.serviceMonitor.enabled=true")
    overridden = annotations("--set-string", "podAnnotations.prometheus\\.io/scrape=false")
    assert overridden["prometheus.io/scrape"] == "false"


def test_the_defaults_install_the_operator_its_rbac_its_metrics_service_and_the_crd() -> None:
    objects = render()
    assert kinds(objects) == sorted(
        ["ClusterRole"] * 3 + ["ClusterRoleBinding"] * 3 + ["Role", "RoleBinding"]
        + ["CustomResourceDefinition", "Deployment", "PodDisruptionBudget", "Service"]
        + ["ServiceAccount"]
    )  # fmt: skip
    (crd,) = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
    committed = yaml.safe_load((REPO / "crds" / "consumergroups.kafleet.io.yaml").read_text())
    assert crd["spec"] == committed["spec"]
    assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}


def test_switches_off_leave_out_the_crd_the_service_account_and_the_rbac() -> None:
    objects = render(
        "--set", "crds.install=false", "--set", "serviceAccount.create=false",
        "--set", "serviceAccount.name=platform-operators", "--set", "rbac.create=false",
    )  # fmt: skip
    assert kinds(objects) == ["Deployment", "PodDisruptionBudget", "Service"]
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "platform-operators"


def deployment_of(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    return deployment


def test_the_defaults_run_two_operator_pods_sharing_one_shard_through_a_lease() -> None:
    objects = render()
    deployment = deployment_of(objects)
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}
    args = container["args"]
    assert args[args.index("--shards") + 1] == "1"
    fields = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert fields == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
    (term,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    (budget,) = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"] == deployment["spec"]["selector"]
    (role,) = [o for o in objects if o["kind"] == "Role"]
    assert role["metadata"]["namespace"] == "ops"
    assert role["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "list", "create", "update", "delete"],
        }
    ]


def test_a_users_affinity_replaces_the_default_anti_affinity() -> None:
    objects = render("--set", "affinity.nodeAffinity.x=1")
    assert deployment_of(objects)["spec"]["template"]["spec"]["affinity"] == {
        "nodeAffinity": {"x": 1}
    }


def test_one_operator_without_leases_is_recreated_and_has_no_budget_nor_lease_role() -> None:
    objects = render("--set", "replicas=1", "--set", "shards=0")
    assert deployment_of(objects)["spec"]["strategy"] == {"type": "Recreate"}
    assert "affinity" not in deployment_of(objects)["spec"]["template"]["spec"]
    assert not {"PodDisruptionBudget", "Role", "RoleBinding"} & set(kinds(objects))


def test_one_operator_pod_with_a_lease_rolls_and_keeps_its_lease_role_without_a_budget() -> None:
    objects = render("--set", "replicas=1", "--set", "shards=1")
    assert deployment_of(objects)["spec"]["strategy"]["type"] == "RollingUpdate"
    assert {"Role", "RoleBinding"} <= set(kinds(objects))
    assert "PodDisruptionBudget" not in kinds(objects)


def test_two_operators_without_leases_are_refused_naming_why() -> None:
    done = _helm("template", "kafleet", str(CHART), "--set", "replicas=2", "--set", "shards=0")
    assert done.returncode != 0
    assert "replicas: 2 with shards: 0: without Leases every operator pod would write" in (
        done.stderr
    )
    assert "set shards >= 1" in done.stderr


def test_the_budget_can_be_turned_off() -> None:
    objects = render("--set", "podDisruptionBudget.enabled=false")
    assert "PodDisruptionBudget" not in kinds(objects)
    assert deployment_of(objects)["spec"]["replicas"] == 2


def test_a_named_service_account_is_the_one_the_rbac_binds() -> None:
    objects = render("--set", "serviceAccount.name=kafleet-ops")
    subjects = [s for o in objects for s in o.get("subjects", [])]
    assert subjects
    assert {s["name"] for s in subjects} == {"kafleet-ops"}
    assert [o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"] == [
        "kafleet-ops"
    ]


def test_the_pod_settings_reach_the_operators_pod() -> None:
    (deployment,) = [o for o in render(*ALL_ON) if o["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]
    assert pod["metadata"]["annotations"]["team"] == "data"
    assert pod["spec"]["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert pod["spec"]["tolerations"][0]["key"] == "dedicated"
    assert pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["spec"]["priorityClassName"] == "system-cluster-critical"
    assert pod["spec"]["securityContext"]["runAsUser"] == 65532
    (container,) = pod["spec"]["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_the_prometheus_rule_carries_the_alerts_of_the_rule_file_but_those_disabled() -> None:
    objects = render(
        "--set", "prometheusRule.enabled=true",
        "--set", "prometheusRule.runbookUrl=https://docs.example/kafleet/operate/runbooks/",
        "--set", "prometheusRule.disabledAlerts={KafleetRebalanceStorm}",
    )  # fmt: skip
    (rule,) = [o for o in objects if o["kind"] == "PrometheusRule"]
    shipped = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    written = {r["alert"]: r for g in yaml.safe_load(queries.RULES.read_text())["groups"]
               for r in g["rules"]}  # fmt: skip
    assert set(shipped) == set(written) - {"KafleetRebalanceStorm"}
    for name, alert in shipped.items():
        assert alert["expr"] == written[name]["expr"]
        assert alert["annotations"]["runbook_url"] == (
            f"https://docs.example/kafleet/operate/runbooks/#{name.lower()}"
        )


def test_the_dashboards_are_configmaps_for_grafanas_sidecar_holding_the_files() -> None:
    objects = render("--set", "grafana.dashboards.enabled=true")
    maps = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ConfigMap"}
    assert sorted(maps) == ["kafleet-kafleet-fleet", "kafleet-kafleet-workers"]
    for config_map in maps.values():
        assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
        ((name, text),) = config_map["data"].items()
        assert json.loads(text) == json.loads((CHART / "dashboards" / name).read_text())


def test_the_service_monitors_scrape_the_operator_and_the_workers_with_the_labels_panels_use() -> (
    None
):
    objects = render("--set", "metrics.serviceMonitor.enabled=true", "--set",
                     "watchNamespaces={shop}")  # fmt: skip
    monitors = {o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == "ServiceMonitor"}
    assert monitors["kafleet-operator"]["endpoints"][0]["honorLabels"] is True
    workers = monitors["kafleet-workers"]
    assert workers["namespaceSelector"] == {"matchNames": ["shop"]}
    assert workers["endpoints"][0]["relabelings"][0]["targetLabel"] == "consumergroup"


def notes(k8s: K8s, *sets: str) -> str:
    """The NOTES helm prints after an install (a client-side dry run: helm asks the apiserver
    its version and whether the objects it would own already exist; ``helm template`` does not
    render NOTES). Without the CRD: other tests apply it with kubectl, and helm refuses to adopt
    an object it does not own."""
    done = _helm(
        "install", "kafleet", str(CHART), "-n", "ops", "--dry-run=client",
        "--kubeconfig", str(k8s.kubeconfig), "--set", "crds.install=false", *sets,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.partition("NOTES:")[2]


def test_the_notes_say_how_many_pods_share_how_many_shards_and_who_leads(k8s: K8s) -> None:
    shared = notes(k8s, "--set", "replicas=3", "--set", "shards=2")
    assert "3 operator pods share 2 shards of the groups" in shared
    assert "(kafleet-operator-<i>-of-2)" in shared
    assert "(kafleet-operator-member-2-<pod>)" in shared
    assert "kubectl -n ops get leases" in shared
    assert "grep -e ^LEASE -e ^kafleet-operator-" in shared
    assert "stands by idle" not in shared
    assert "no pod stands by idle" in notes(k8s, "--set", "shards=2")
    single = notes(k8s, "--set", "replicas=1", "--set", "shards=0")
    assert "One operator pod, without Leases (shards: 0)" in single
    assert "leases" not in single


@pytest.fixture(scope="module")
def prometheus_operator_crds(k8s: K8s) -> None:
    for crd in prometheus.operator_crds():
        k8s.kubectl("apply", "--server-side", "-f", str(crd))
    k8s.kubectl(
        "wait", "--for=condition=Established", "crd/servicemonitors.monitoring.coreos.com",
        "crd/prometheusrules.monitoring.coreos.com", "crd/podmonitors.monitoring.coreos.com",
    )  # fmt: skip


def test_every_switch_on_renders_objects_the_real_apiserver_accepts(
    k8s: K8s, namespace: str, prometheus_operator_crds: None, tmp_path: Path
) -> None:
    objects = render(*ALL_ON, namespace=namespace)
    assert kinds(objects).count("ServiceMonitor") == 2
    assert "PrometheusRule" in kinds(objects)
    manifest = tmp_path / "all.yaml"
    manifest.write_text(yaml.safe_dump_all(objects))
    out = k8s.kubectl(
        "apply", "--dry-run=server", "--server-side", "--force-conflicts",
        "--field-manager=helm-dry-run", "-f", str(manifest),
    )  # fmt: skip
    applied = [line for line in out.splitlines() if "(server dry run)" in line]
    assert len(applied) == len(objects), out
