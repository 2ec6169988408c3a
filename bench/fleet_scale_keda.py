"""B9's KEDA half at one N: real KEDA (``tests/infra/keda.py``) with a Deployment of one replica
and a ScaledObject for each group (kafka trigger on the group's topic, ``lagThreshold`` 100,
``pollingInterval`` 5, 1..8, the HPA allowed 8 pods per 15 s), measured as kafleet is.

Owns the objects, what Ready means for a ScaledObject (Ready and its HPA seen: ``HPAActive``),
what its decision is (its HPA's ``desiredReplicas``) and deleting the ScaledObjects while KEDA
still runs (its finalizers). Does not own the order of a run (``fleet_scale_run.py``,
``b9_fleet_scale.py``) or KEDA itself.
"""

from __future__ import annotations

from typing import Any, cast

import kubernetes

from bench import fleet_scale_figures as figures
from bench import fleet_scale_run
from bench.fleet_scale_figures import Measured
from bench.fleet_scale_run import Run
from tests.infra import keda as keda_infra

THRESHOLD, MAX_REPLICAS, INTERVAL_S = 100, figures.FULL, figures.TICK_S


def measure(run: Run, bootstrap: str, image: str, placement: dict[str, Any]) -> Measured:
    groups = run.topics.groups
    measured = Measured(len(groups))
    deployments = [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
         "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                  "template": {"metadata": {"labels": {"app": name}}, "spec": {
                      **placement, "containers": [{"name": "worker", "image": image}]}}}}
        for name in groups
    ]  # fmt: skip
    scaled = [
        {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": name},
         "spec": {"scaleTargetRef": {"name": name}, "pollingInterval": int(INTERVAL_S),
                  "minReplicaCount": 1, "maxReplicaCount": MAX_REPLICAS,
                  "advanced": {"horizontalPodAutoscalerConfig": {"behavior": {"scaleUp": {
                      "policies": [{"type": "Pods", "value": MAX_REPLICAS,
                                    "periodSeconds": 15}]}}}},
                  "triggers": [{"type": "kafka", "metadata": {
                      "bootstrapServers": bootstrap, "consumerGroup": name, "topic": topic,
                      "lagThreshold": str(THRESHOLD)}}]}}
        for name, topic in groups.items()
    ]  # fmt: skip
    with keda_infra.start_keda(run.plane) as keda, run.namespace("b9-keda") as ns:
        custom = kubernetes.client.CustomObjectsApi(run.api)
        apps = kubernetes.client.AppsV1Api(custom.api_client)
        hpas = kubernetes.client.AutoscalingV2Api(custom.api_client)
        kind = ("keda.sh", "v1alpha1", ns, "scaledobjects")

        def ready() -> int:  # and the HPA seen: KEDA's last status write of a new one
            found = cast(dict[str, Any], custom.list_namespaced_custom_object(*kind))
            return sum(figures.ready(so, also="HPAActive") for so in found["items"])

        def read(name: str) -> tuple[bool, int]:
            hpa = hpas.read_namespaced_horizontal_pod_autoscaler(f"keda-hpa-{name}", ns)
            wished = ((hpa.status and hpa.status.desired_replicas) or 0) > 1
            return wished, apps.read_namespaced_deployment(name, ns).spec.replicas or 0

        run.apply(ns, deployments)
        try:
            logs = dict.fromkeys(keda.logs.values(), '"level":"error"')
            run.apply_and_settle(measured, ns, scaled, ready)
            run.measure(measured, read, keda.pids, logs)
        finally:  # while KEDA runs: its finalizer would hold them
            fleet_scale_run.cleanup(run.plane, "delete", "scaledobjects", "--all", "-n", ns)
    return measured
