"""The objects a ConsumerGroup owns, built without a cluster: the spec is validated naming the
field, the pods run restricted with probes on the sidecar, secrets come from Secrets, tuning
changes only the ConfigMap, and the CRD in crds/ is what the models generate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kafleet.errors import ConfigError
from kafleet_operator import builders, crd
from kafleet_operator.spec import parse_spec

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

    assert committed == crd.render(), "run: python -m kafleet_operator.crd > crds/..."
    chart_copy = REPO / "charts" / "kafleet" / "crds" / "consumergroups.kafleet.io.yaml"
    assert chart_copy.read_text() == committed, "copy crds/ into charts/kafleet/crds/"


def test_every_worker_field_is_in_the_crd_except_those_the_operator_sets() -> None:
    from kafleet.config import ConsumerConfig

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
    worker, sidecar = pod["containers"]
    assert deployment["spec"]["replicas"] == 3
    assert worker["args"][:2] == ["kafleet", "worker"]
    assert sidecar["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert sidecar["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for container in (worker, sidecar):
        context = container["securityContext"]
        assert context["runAsNonRoot"]
        assert context["readOnlyRootFilesystem"]
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert not context["allowPrivilegeEscalation"]
    assert pod["terminationGracePeriodSeconds"] > parsed.worker.shutdown_grace_s
    assert worker["env"] == [
        {
            "name": "KAFLEET_SECURITY__SASL_PASSWORD",
            "valueFrom": {"secretKeyRef": {"name": "billing-kafka", "key": "password"}},
        }
    ]
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
