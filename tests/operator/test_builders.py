"""The objects a ConsumerGroup owns, built without a cluster: the spec is validated naming the
field, the pods run restricted with probes on the worker that a native sidecar answers,
secrets come from Secrets, tuning changes only the ConfigMap, a pod_template adds to the pods
without replacing what the operator needs (and is refused where it would), and the CRD in
crds/ is what the models generate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kafleet.errors import ConfigError
from kafleet_operator.policy import builders, crd, pod_spec
from kafleet_operator.policy.spec import parse_spec

REPO = Path(__file__).resolve().parents[2]
OWNER = {
    "apiVersion": "kafleet.io/v1alpha1",
    "kind": "ConsumerGroup",
    "metadata": {"name": "billing", "namespace": "shop", "uid": "u-1"},
}


def example_spec() -> dict[str, Any]:
    manifest = yaml.safe_load((REPO / "examples" / "consumergroup.yaml").read_text())
    return dict(manifest["spec"])


def test_the_committed_crd_is_what_the_models_generate() -> None:
    committed = (REPO / "crds" / "consumergroups.kafleet.io.yaml").read_text()

    assert committed == crd.render(), "run: python -m kafleet_operator.policy.crd > crds/..."
    chart_copy = REPO / "charts" / "kafleet" / "files" / "consumergroups.kafleet.io.yaml"
    assert chart_copy.read_text() == committed, "copy crds/ into charts/kafleet/files/"


def test_every_worker_field_is_in_the_crd_except_those_the_operator_sets() -> None:
    from kafleet.config.model import ConsumerConfig

    properties = crd.spec_schema()["properties"]

    for name in ConsumerConfig.model_fields:
        assert (name in properties) != (name in ("state_file", "state_interval_ms")), name
    security = properties["security"]["properties"]
    assert "sasl_password" not in security  # only from a Secret:
    assert "sasl_password_secret" in security


def test_the_deployment_runs_worker_and_sidecar_restricted_with_probes_and_a_drain() -> None:
    parsed = parse_spec(example_spec())

    deployment = builders.deployment(OWNER, parsed, replicas=3)

    pod = deployment["spec"]["template"]["spec"]
    (worker,) = pod["containers"]
    (sidecar,) = pod["initContainers"]
    assert deployment["spec"]["replicas"] == 3
    # A native sidecar: started before the worker, stopped only after the worker has drained.
    assert sidecar["restartPolicy"] == "Always"
    # What the container runs, whatever the image's entrypoint: `kafleet worker`, once.
    assert [*worker["command"], *worker["args"][:1]] == ["kafleet", "worker"]
    assert [*sidecar["command"], *sidecar["args"][:1]] == ["kafleet", "sidecar"]
    # The worker is probed (and restarted), the sidecar answering on its numeric port; the
    # sidecar's own probe only checks that its server is up.
    assert worker["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": 8080}
    assert worker["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 8080}
    assert sidecar["livenessProbe"] == {"tcpSocket": {"port": 8080}, "periodSeconds": 10}
    assert "readinessProbe" not in sidecar
    for container in (worker, sidecar):
        context = container["securityContext"]
        assert context["runAsNonRoot"]
        assert context["readOnlyRootFilesystem"]
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert not context["allowPrivilegeEscalation"]
    assert pod["terminationGracePeriodSeconds"] > parsed.worker.shutdown_grace_s
    assert pod["automountServiceAccountToken"] is False
    assert {
        "name": "KAFLEET_SECURITY__SASL_PASSWORD",
        "valueFrom": {"secretKeyRef": {"name": "billing-kafka", "key": "password"}},
    } in worker["env"]
    assert deployment["metadata"]["ownerReferences"][0]["uid"] == "u-1"


def test_the_config_map_holds_the_workers_file_without_secrets() -> None:
    parsed = parse_spec(example_spec())

    data = yaml.safe_load(builders.config_map(OWNER, parsed)["data"]["worker.yaml"])

    assert data["group_id"] == "billing"
    assert data["state_file"] == "/var/run/kafleet/state.json"
    assert data["security"] == {
        "protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username": "billing",
    }
    assert "image" not in data  # fleet settings stay out of the worker's file


def test_a_tuning_change_touches_only_the_config_map() -> None:
    parsed = parse_spec(example_spec())

    before = builders.deployment(OWNER, parsed, 2), builders.config_map(OWNER, parsed, 500)
    after = builders.deployment(OWNER, parsed, 2), builders.config_map(OWNER, parsed, 120)

    assert before[0] == after[0]  # the pod template is the same: no restart
    assert "max_poll_records: 120" in after[1]["data"]["worker.yaml"]


def _template_hash(**change: object) -> str:
    deployment = builders.deployment(OWNER, parse_spec({**example_spec(), **change}), 2)
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    return str(annotations[builders.CONFIG_HASH])


@pytest.mark.parametrize(
    "change",
    [
        {"handler": "orders:refund"},
        {"topics": ["orders", "returns"]},
        {"group_id": "billing-v2"},
        {"bootstrap_servers": "kafka-2:9092"},
        {"retry": {"max_attempts": 9}},
        {"security": {"protocol": "SSL"}},
        {"spark": {"table": "s3a://lake/other"}},
    ],
)
def test_an_edit_a_worker_takes_only_at_start_changes_the_pod_template(
    change: dict[str, object],
) -> None:
    assert _template_hash(**change) != _template_hash()


@pytest.mark.parametrize("change", [{"max_poll_records": 77}, {"concurrency": 3}])
def test_an_edit_workers_take_live_leaves_the_pod_template_alone(
    change: dict[str, object],
) -> None:
    assert _template_hash(**change) == _template_hash()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"spark": {"table": "/t", "batch": {"max_records": 9000}}}, "spark.batch.max_records"),
        ({"state_file": "/x"}, "state_file"),
        ({"autoscaling": {"min_replicas": 5, "max_replicas": 2}}, "autoscaling"),
        (
            {"security": {"protocol": "SASL_SSL", "sasl_mechanism": "PLAIN"}},
            "security.sasl_password_secret",
        ),
        ({"image": ""}, "image"),
        ({"drain_timeout_s": 200, "max_poll_interval_ms": 300_000}, "drain_timeout_s"),
    ],
)
def test_a_spec_the_schema_cannot_catch_is_refused_naming_the_field(
    change: dict[str, Any], field: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_spec({**example_spec(), **change})

    assert field in caught.value.fields


POD_NAME = {
    "name": "KAFLEET_GROUP_INSTANCE_ID",
    "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
}


def test_each_pod_joins_its_group_as_a_static_member_named_after_the_pod() -> None:
    parsed = parse_spec({**example_spec(), "static_membership": True})

    pod = builders.deployment(OWNER, parsed, 2)["spec"]["template"]["spec"]
    (worker,), (sidecar,) = pod["containers"], pod["initContainers"]

    assert POD_NAME in worker["env"]
    assert "env" not in sidecar


def test_members_are_dynamic_unless_static_membership_is_asked_for() -> None:
    parsed = parse_spec(example_spec())

    worker = builders.deployment(OWNER, parsed, 2)["spec"]["template"]["spec"]["containers"][0]

    assert POD_NAME not in worker["env"]
    assert all(var["name"] != "KAFLEET_GROUP_INSTANCE_ID" for var in worker["env"])


def test_the_worker_reads_the_pods_name_as_its_group_instance_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kafleet.config.loading import load_config

    parsed = parse_spec(example_spec())
    file = tmp_path / "worker.yaml"
    file.write_text(builders.config_map(OWNER, parsed)["data"]["worker.yaml"])
    monkeypatch.setenv("KAFLEET_GROUP_INSTANCE_ID", "billing-7d9f8c6b5-x2x7q")  # the fieldRef
    monkeypatch.setenv("KAFLEET_SECURITY__SASL_PASSWORD", "from-the-secret")  # the secretKeyRef

    config = load_config(file)

    assert config.group_instance_id == "billing-7d9f8c6b5-x2x7q"
    assert config.librdkafka()["group.instance.id"] == "billing-7d9f8c6b5-x2x7q"


def test_a_group_instance_id_in_the_spec_is_refused_pointing_at_static_membership() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_spec({**example_spec(), "group_instance_id": "billing-1"})

    assert caught.value.fields == ("group_instance_id",)
    assert "static_membership" in str(caught.value)


QUANTITIES = ["500m", "2", 2, "1.5Gi", "512Mi", "129e6", "1E3", "+1", ".5", "0", "100k"]
NOT_QUANTITIES = ["lots", "1.5 Gi", "2 cores", "1GB", "", "Mi", "0.5.1", 0.5, True]


@pytest.mark.parametrize("value", QUANTITIES)
def test_resources_take_what_kubernetes_calls_a_quantity(value: object) -> None:
    spec = {**example_spec(), "resources": {"requests": {"cpu": value}, "limits": {"cpu": value}}}

    worker = builders.deployment(OWNER, parse_spec(spec), 1)["spec"]["template"]["spec"][
        "containers"
    ][0]

    assert worker["resources"] == {"requests": {"cpu": value}, "limits": {"cpu": value}}


@pytest.mark.parametrize("value", NOT_QUANTITIES)
def test_a_resource_that_is_not_a_quantity_is_refused_naming_the_field(value: object) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_spec({**example_spec(), "resources": {"limits": {"cpu": value}}})

    assert any(field.startswith("resources.limits.cpu") for field in caught.value.fields)


def test_resources_other_than_requests_and_limits_are_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_spec({**example_spec(), "resources": {"limit": {"cpu": "1"}}})

    assert caught.value.fields == ("resources.limit",)


# Issue 11's four malformed ConsumerGroups: each is refused naming a field by the model the CRD,
# the operator and the worker share (the API server's refusal is in test_reconcile.py).
ISSUE_11 = [
    ({"guarantee": "exactly-once"}, ("guarantee", "spark", "spark.table")),
    (
        {"guarantee": "exactly-once", "spark": {"job": "jobs:write"}},
        ("guarantee", "spark.table"),
    ),
    ({"handler": "bill"}, ("handler",)),
    ({"resources": {"limits": {"cpu": "lots"}}}, ("resources.limits.cpu",)),
]


@pytest.mark.parametrize(("change", "fields"), ISSUE_11)
def test_the_malformed_specs_of_issue_11_are_refused_naming_the_field(
    change: dict[str, Any], fields: tuple[str, ...]
) -> None:
    spec = {k: v for k, v in example_spec().items() if k != "spark"}

    with pytest.raises(ConfigError) as caught:
        parse_spec({**spec, **change})

    assert set(caught.value.fields) & set(fields), caught.value


def _pod(**change: Any) -> dict[str, Any]:
    deployment = builders.deployment(OWNER, parse_spec({**example_spec(), **change}), 2)
    return dict(deployment["spec"]["template"])


CA_SECRET = {"name": "kafka-ca", "secret": {"secretName": "cluster-ca-cert"}}
CA_MOUNT = {"name": "kafka-ca", "mountPath": "/etc/kafka-ca", "readOnly": True}


def test_a_pod_templates_volumes_are_added_to_the_operators_and_mounted_in_the_worker() -> None:
    template = _pod(
        pod_template={
            "volumes": [CA_SECRET],
            "worker": {
                "volumeMounts": [CA_MOUNT],
                "env": [{"name": "TZ", "value": "UTC"}],
                "envFrom": [{"secretRef": {"name": "handler-keys"}}],
            },
            "sidecar": {"env": [{"name": "LOG_LEVEL", "value": "debug"}]},
        }
    )

    pod = template["spec"]
    (worker,), (sidecar,) = pod["containers"], pod["initContainers"]
    assert [v["name"] for v in pod["volumes"]] == ["config", "state", "tmp", "kafka-ca"]
    assert pod["volumes"][-1] == CA_SECRET
    assert [m["name"] for m in worker["volumeMounts"]] == ["config", "state", "tmp", "kafka-ca"]
    assert worker["volumeMounts"][-1] == CA_MOUNT
    assert {"name": "TZ", "value": "UTC"} in worker["env"]
    assert any(v["name"] == "KAFLEET_SECURITY__SASL_PASSWORD" for v in worker["env"])
    assert worker["envFrom"] == [{"secretRef": {"name": "handler-keys"}}]
    assert sidecar["env"] == [{"name": "LOG_LEVEL", "value": "debug"}]
    assert [m["name"] for m in sidecar["volumeMounts"]] == ["state"]
    assert pod["securityContext"]["runAsUser"] == pod_spec.IMAGE_USER


def test_a_pod_template_of_placement_and_metadata_as_before_is_merged_into_the_pods() -> None:
    placement = {
        "nodeSelector": {"kafleet.io/real-node": "true"},
        "tolerations": [{"key": "kafleet.io/real-node", "operator": "Exists"}],
        "metadata": {"labels": {"team": "billing"}, "annotations": {"owner": "ada"}},
        "priorityClassName": "fleet-high",
        "serviceAccountName": "billing-workload",
        "imagePullSecrets": [{"name": "registry"}],
    }

    template = _pod(pod_template=placement)

    pod, meta = template["spec"], template["metadata"]
    assert pod["nodeSelector"] == placement["nodeSelector"]
    assert pod["tolerations"] == placement["tolerations"]
    assert pod["priorityClassName"] == "fleet-high"
    assert pod["serviceAccountName"] == "billing-workload"
    assert pod["imagePullSecrets"] == [{"name": "registry"}]
    assert pod["automountServiceAccountToken"] is False  # still no API token
    assert meta["labels"]["team"] == "billing"
    assert meta["labels"]["app.kubernetes.io/instance"] == "billing"
    assert meta["annotations"]["owner"] == "ada"
    assert builders.CONFIG_HASH in meta["annotations"]


@pytest.mark.parametrize(
    ("template", "field", "words"),
    [
        ({"containers": [{"name": "x"}]}, "pod_template", "containers: the operator builds"),
        ({"securityContext": {"runAsUser": 0}}, "pod_template", "securityContext"),
        ({"initContainers": []}, "pod_template", "initContainers"),
        ({"volumes": [{"name": "config", "emptyDir": {}}]}, "pod_template.volumes.0", "config"),
        (
            {"volumes": [CA_SECRET], "worker": {"volumeMounts": [{**CA_MOUNT, "name": "state"}]}},
            "pod_template.worker.volumeMounts.0",
            "operator's",
        ),
        (
            {
                "volumes": [CA_SECRET],
                "worker": {"volumeMounts": [{**CA_MOUNT, "mountPath": "/tmp"}]},
            },
            "pod_template.worker.volumeMounts.0",
            "/tmp",
        ),
        (
            {
                "volumes": [CA_SECRET],
                "sidecar": {"volumeMounts": [{**CA_MOUNT, "mountPath": "/etc/kafleet/ca/"}]},
            },
            "pod_template.sidecar.volumeMounts.0",
            "/etc/kafleet",
        ),
        ({"worker": {"volumeMounts": [CA_MOUNT]}}, "pod_template", "'kafka-ca' is not a volume"),
        (
            {"worker": {"env": [{"name": "KAFLEET_GROUP_ID", "value": "x"}]}},
            "pod_template.worker.env.0",
            "KAFLEET_",
        ),
        (
            {"worker": {"envFrom": [{"prefix": "KAFLEET_", "secretRef": {"name": "s"}}]}},
            "pod_template.worker.envFrom.0",
            "KAFLEET_",
        ),
        (
            {"metadata": {"labels": {"app.kubernetes.io/instance": "other"}}},
            "pod_template.metadata",
            "select the group's pods",
        ),
        ({"worker": {"resources": {}}}, "pod_template.worker.resources", "not permitted"),
        ({"nodeselector": {"a": "b"}}, "pod_template.nodeselector", "not permitted"),
    ],
)
def test_a_pod_template_that_would_replace_what_the_operator_needs_is_refused_naming_it(
    template: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_spec({**example_spec(), "pod_template": template})

    assert field in caught.value.fields, caught.value
    assert words in str(caught.value)


def test_the_crd_carries_the_pod_templates_refusals_as_rules_of_the_api_server() -> None:
    template = crd.spec_schema()["properties"]["pod_template"]
    worker = template["properties"]["worker"]["properties"]

    rules = [
        rule["rule"]
        for schema in (
            template,
            template["properties"]["volumes"]["items"],
            worker["env"]["items"],
            worker["volumeMounts"]["items"],
        )
        for rule in schema["x-kubernetes-validations"]
    ]
    assert any("KAFLEET_" in rule for rule in rules)
    assert any("'config', 'state', 'tmp'" in rule for rule in rules)
    assert any("'/etc/kafleet', '/var/run/kafleet', '/tmp'" in rule for rule in rules)
    assert any("self.volumes.exists" in rule for rule in rules)
    assert "containers" not in template["properties"]  # strict field validation refuses it


def test_a_worker_with_no_requests_gets_the_defaults_and_given_ones_are_kept() -> None:
    def resources(given: dict[str, Any]) -> Any:
        (worker,) = _pod(resources=given)["spec"]["containers"]
        return worker["resources"]

    assert resources({}) == {"requests": pod_spec.DEFAULT_REQUESTS}
    # A limit alone is also the request (Kubernetes' rule): no default beside it.
    assert resources({"limits": {"memory": "1Gi"}}) == {
        "limits": {"memory": "1Gi"},
        "requests": {"cpu": "100m"},
    }
    assert resources({"requests": {"cpu": "2"}}) == {"requests": {"cpu": "2"}}


def test_a_rollout_replaces_a_quarter_of_the_fleet_per_step_and_never_runs_short() -> None:
    deployment = builders.deployment(OWNER, parse_spec(example_spec()), 20)

    rolling = deployment["spec"]["strategy"]["rollingUpdate"]
    assert rolling == {"maxSurge": "25%", "maxUnavailable": 0}


def test_pods_spread_over_zones_then_nodes_unless_the_template_says_otherwise() -> None:
    spread = _pod()["spec"]["topologySpreadConstraints"]
    assert [(c["topologyKey"], c["whenUnsatisfiable"], c["maxSkew"]) for c in spread] == [
        ("topology.kubernetes.io/zone", "ScheduleAnyway", 1),
        ("kubernetes.io/hostname", "ScheduleAnyway", 1),
    ]
    assert all(
        c["labelSelector"]["matchLabels"] == builders.match_labels("billing") for c in spread
    )

    own = [{"maxSkew": 2, "topologyKey": "rack", "whenUnsatisfiable": "DoNotSchedule"}]
    assert (
        _pod(pod_template={"topologySpreadConstraints": own})["spec"]["topologySpreadConstraints"]
        == own
    )
    assert (
        "topologySpreadConstraints"
        not in _pod(pod_template={"topologySpreadConstraints": []})["spec"]
    )


def test_the_metrics_service_targets_the_sidecars_port_by_number() -> None:
    ports = builders.service(OWNER)["spec"]["ports"]

    assert ports == [{"name": "metrics", "port": 8080, "targetPort": 8080}]


@pytest.mark.parametrize(("partition_metrics", "flag"), [(True, "on"), (False, "off")])
def test_the_sidecar_exports_per_partition_series_unless_the_group_turns_them_off(
    partition_metrics: bool, flag: str
) -> None:
    parsed = parse_spec({**example_spec(), "partition_metrics": partition_metrics})

    pod = builders.deployment(OWNER, parsed, 1)["spec"]["template"]["spec"]
    (sidecar,) = pod["initContainers"]

    assert sidecar["args"][sidecar["args"].index("--partition-metrics") + 1] == flag
