"""What the operator owns in a pod is refused by the API server itself, naming the field and
why, before any object is built (issue 21, defect 5): the CRD carries the same rules as the
model, and a template the operator can merge is accepted."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.conftest import K8s
from tests.infra.kafka import TestbedError
from tests.operator.conftest import consumer_group

CA = {"name": "kafka-ca", "secret": {"secretName": "cluster-ca-cert"}}
TMP_CA = "/tmp/ca"  # under the worker's own /tmp
REFUSED = [
    ({"containers": [{"name": "x", "image": "x"}]}, "containers"),
    ({"securityContext": {"runAsUser": 0}}, "securityContext"),
    ({"volumes": [{"name": "config", "emptyDir": {}}]}, "are the operator's"),
    (
        {
            "volumes": [CA],
            "worker": {"volumeMounts": [{"name": "kafka-ca", "mountPath": "/tmp/ca"}]},
        },
        "the operator mounts",
    ),
    ({"worker": {"env": [{"name": "KAFLEET_GROUP_ID", "value": "other"}]}}, "KAFLEET_"),
    ({"metadata": {"labels": {"app.kubernetes.io/instance": "other"}}}, "select the group's pods"),
]


def dry_run(k8s: K8s, namespace: str, manifest: dict[str, Any]) -> str:
    return k8s.kubectl(
        "apply", "-n", namespace, "--dry-run=server", "-f", "-", input=yaml.safe_dump(manifest)
    )


@pytest.mark.parametrize(("template", "named"), REFUSED)
def test_a_template_that_touches_what_the_operator_owns_is_refused_naming_it(
    k8s: K8s, namespace: str, kafka: str, crd: str, template: dict[str, Any], named: str
) -> None:
    manifest = consumer_group("templated", kafka, "orders", pod_template=template)

    with pytest.raises(TestbedError, match=named) as refused:
        dry_run(k8s, namespace, manifest)
    print(refused.value)


def test_a_ca_from_a_secret_volume_mounted_into_the_worker_is_accepted(
    k8s: K8s, namespace: str, kafka: str, crd: str
) -> None:
    template = {
        "volumes": [CA],
        "worker": {"volumeMounts": [{"name": "kafka-ca", "mountPath": "/etc/kafka-ca"}]},
        "nodeSelector": {"disk": "ssd"},
    }
    manifest = consumer_group("templated", kafka, "orders", pod_template=template)

    assert "created (server dry run)" in dry_run(k8s, namespace, manifest)
