"""Real KEDA works on the test bed: a ScaledObject with the ``kafka`` trigger scales a Deployment
by the lag of a group on the session's broker, through the apiserver's aggregated external
metrics API and the controller manager's HPA; and a benchmark can measure KEDA's processes.

What KEDA did here first, and why the figures look as they do, is in ``../shared/KEDA.md``."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import AppsV1Api

from tests.conftest import K8s, TopicFactory
from tests.infra import keda as keda_infra
from tests.infra.kafka import TestbedError
from tests.infra.records import ProduceReport
from tests.infra.waiting import wait_until

PARTITIONS = 8
PER_PARTITION = 2_000
LAG_THRESHOLD = 100
MAX_REPLICAS = 20
SCALE_UP_TIMEOUT_S = 90.0
HPA_SYNC_S = 15  # kube-controller-manager's --horizontal-pod-autoscaler-sync-period default


def deployment(name: str) -> dict[str, Any]:
    """One replica whose pods kwok runs on its fake nodes (the image is never pulled)."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {"type": "kwok"},
                    "containers": [{"name": "consumer", "image": "example.invalid/consumer:1"}],
                },
            },
        },
    }


def scaled_object(name: str, bootstrap: str, group: str, topic: str) -> dict[str, Any]:
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": name},
        "spec": {
            "scaleTargetRef": {"name": name},
            "pollingInterval": 5,
            "minReplicaCount": 1,
            "maxReplicaCount": MAX_REPLICAS,
            "triggers": [
                {
                    "type": "kafka",
                    "metadata": {
                        "bootstrapServers": bootstrap,
                        "consumerGroup": group,
                        "topic": topic,
                        "lagThreshold": str(LAG_THRESHOLD),
                        "offsetResetPolicy": "earliest",
                    },
                }
            ],
        },
    }


def scaled_object_state(k8s: K8s, namespace: str, name: str) -> str:
    """The ScaledObject's conditions and its HPA's status, for a failure's message."""
    found = k8s.kubectl("get", "scaledobject", name, "-n", namespace, "-o", "json", check=False)
    conditions = json.loads(found).get("status", {}).get("conditions", []) if found else []
    hpa = k8s.kubectl("get", "hpa", f"keda-hpa-{name}", "-n", namespace, "-o", "json", check=False)
    return (
        "ScaledObject conditions: "
        + "; ".join(f"{c['type']}={c['status']} ({c.get('message', '')})" for c in conditions)
        + f"\nHPA status: {json.loads(hpa).get('status') if hpa else 'no HPA'}"
    )


def test_keda_scales_a_deployment_to_the_partition_count_of_a_lagging_group(
    keda: keda_infra.Keda,
    k8s: K8s,
    namespace: str,
    kafka: str,
    topic_factory: TopicFactory,
    group_id: Callable[[], str],
    produce: Callable[..., ProduceReport],
) -> None:
    """16,000 records behind a group that never committed, 100 per replica: far more than one
    replica per partition, so KEDA caps the metric at the partition count (unless
    allowIdleConsumers) and the HPA stops at 8, not at maxReplicaCount."""
    topic = topic_factory(partitions=PARTITIONS)
    for partition in range(PARTITIONS):
        produce(topic, PER_PARTITION, start=partition * PER_PARTITION, partition=partition)
    name = "consumer"
    k8s.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(deployment(name)))
    apps = AppsV1Api(k8s.api)

    def replicas() -> int:
        return int(apps.read_namespaced_deployment(name, namespace).spec.replicas or 0)

    body = scaled_object(name, kafka, group_id(), topic)
    k8s.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(body))
    created = time.monotonic()
    seen = [(0.0, replicas())]
    try:
        while seen[-1][1] < PARTITIONS:
            if time.monotonic() - created > SCALE_UP_TIMEOUT_S:
                raise AssertionError(
                    f"the Deployment went through {seen} (s, replicas), not {PARTITIONS} in "
                    f"{SCALE_UP_TIMEOUT_S:g} s\n{scaled_object_state(k8s, namespace, name)}\n"
                    f"KEDA's logs: {', '.join(str(p) for p in keda.logs.values())}"
                )
            time.sleep(0.5)
            if (now := replicas()) != seen[-1][1]:
                seen.append((round(time.monotonic() - created, 1), now))
        print(f"\nKEDA scaled the Deployment (s after the ScaledObject, replicas): {seen}")

        time.sleep(HPA_SYNC_S + 2)  # another HPA sync: it does not go past the partitions

        assert replicas() == PARTITIONS, scaled_object_state(k8s, namespace, name)
        found = k8s.kubectl("get", "scaledobject", name, "-n", namespace, "-o", "json")
        states = {c["type"]: c["status"] for c in json.loads(found)["status"]["conditions"]}
        assert states.items() >= {"Ready": "True", "Active": "True"}.items(), states
    finally:
        # KEDA's finalizer holds a ScaledObject until the operator lets go: delete it now,
        # while KEDA runs, or the test's namespace never goes.
        k8s.kubectl("delete", "scaledobject", name, "-n", namespace, "--timeout=60s", check=False)


def test_a_benchmark_can_read_kedas_processes_and_the_operators_metrics(
    keda: keda_infra.Keda,
) -> None:
    assert set(keda.pids) == {"keda-operator", "keda-adapter"}
    for command, pid in keda.pids.items():
        status = Path(f"/proc/{pid}/status").read_text()
        assert int(status.split("VmRSS:")[1].split()[0]) > 0, command
        assert len(Path(f"/proc/{pid}/stat").read_text().split()) > 15, command
        assert keda.logs[command].exists()

    def exposition() -> str:
        url = f"http://{keda.metrics_address}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            return str(response.read().decode())

    assert "keda_build_info" in wait_until(exposition, 10, "the operator's metrics")


def test_without_the_binaries_start_keda_says_to_run_make_keda(
    k8s: K8s, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(keda_infra, "BIN", tmp_path / "bin")

    with pytest.raises(TestbedError, match="run `make keda`"), keda_infra.start_keda(k8s.plane):
        pass
