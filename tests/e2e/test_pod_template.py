"""What a user adds to the fleet's pods through ``pod_template`` reaches them beside what the
operator needs (issue 21, defect 5: ``pod_template`` was spread over the pod spec, so its
``volumes`` replaced the operator's and the API server refused the Deployment, and nothing
could give the worker a volume mount): a broker's CA, kept in a Secret as a Strimzi cluster CA
is, mounted into the worker, which then connects over TLS and bills every order."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.e2e.conftest import Release
from tests.e2e.fleet import (
    Cluster,
    apply,
    billed,
    committed,
    consumer_group,
    end_offsets,
    logs,
    pods,
    produce_orders,
)
from tests.infra.kafka import KafkaBroker
from tests.infra.waiting import wait_until

pytestmark = pytest.mark.timeout(900)

CA_DIR = "/etc/kafka-ca"


def _ready_or_refused(cluster: Cluster, namespace: str, name: str) -> list[str]:
    """The group's one Ready pod, or a failure with the API server's refusal of its objects."""
    found: list[str] = []

    def settled() -> bool:
        group = cluster.json("get", "kcg", "-n", namespace, name)
        refusal = group.get("status", {}).get("applyFailure")
        assert not refusal, f"the operator's objects were refused: {refusal}"
        ready = [
            p["metadata"]["name"]
            for p in pods(cluster, namespace, name)
            if not p["metadata"].get("deletionTimestamp")
            and any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in p["status"].get("conditions", [])
            )
        ]
        found[:] = ready
        return len(ready) == 1

    wait_until(settled, 240, f"a Ready pod of {name}", every=1)
    return found


def test_a_worker_trusts_the_brokers_ca_from_a_secret_mounted_through_the_pod_template(
    fleet_cluster: Cluster,
    operator: Release,
    admin: AdminClient,
    kafka: str,
    kafka_broker: KafkaBroker,
) -> None:
    ns, name = operator.watched, "tls"
    tls = kafka_broker.pods_ssl
    topic = f"orders-{name}-{time.time_ns()}"
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    orders = produce_orders(kafka, topic, 0, 200)
    fleet_cluster.kubectl(
        "create", "secret", "generic", "kafka-cluster-ca", "-n", ns, f"--from-file={tls.ca_path}"
    )
    template: dict[str, Any] = {
        **fleet_cluster.placement,
        "metadata": {"labels": {"team": "billing"}},
        "volumes": [{"name": "kafka-ca", "secret": {"secretName": "kafka-cluster-ca"}}],
        "worker": {"volumeMounts": [{"name": "kafka-ca", "mountPath": CA_DIR, "readOnly": True}]},
    }
    group = consumer_group(
        name,
        fleet_cluster.images.examples,
        tls.bootstrap,
        topic,
        pod_template=template,
        security={"protocol": "SSL", "ssl_ca_location": f"{CA_DIR}/ca.crt"},
    )
    apply(fleet_cluster, ns, group)

    (pod,) = _ready_or_refused(fleet_cluster, ns, name)

    wait_until(
        lambda: set(billed(logs(fleet_cluster, ns, pod))) >= orders,
        180,
        "every order billed by the worker over TLS",
        every=2,
    )
    text = logs(fleet_cluster, ns, pod)
    assert "assigned [" in text, text[-2000:]
    wait_until(
        lambda: committed(kafka, name, topic, 2) == end_offsets(kafka, topic, 2),
        60,
        "the group's lag to reach 0",
        every=1,
    )
    (live,) = [p for p in pods(fleet_cluster, ns, name) if p["metadata"]["name"] == pod]
    assert live["metadata"]["labels"]["team"] == "billing"
    # The operator's own volumes are all still there, beside the user's.
    volumes = {v["name"] for v in live["spec"]["volumes"]}
    assert {"config", "state", "tmp", "kafka-ca"} <= volumes, volumes
    fleet_cluster.kubectl("delete", "kcg", "-n", ns, name, "--wait=false")
