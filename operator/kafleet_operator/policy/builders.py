"""The objects a ``ConsumerGroup`` owns, as pure functions of its parsed spec.

Owns: the desired Deployment around the group's pod (a rollout in steps of a quarter of the
fleet, the pod template's metadata: the user's ``pod_template`` labels and annotations merged
under the operator's, and the config hash), the ConfigMap (the worker's validated
configuration as YAML: the worker watches it, so tuning changes apply without a restart) and
the metrics Service; their names, labels, selector and owner references. No I/O: every case is
tested without a cluster.

A change that touches only live-tunable values (``max_poll_records``, ``concurrency``) changes
only the ConfigMap, never the pod template, so no pod restarts for tuning. Any other change of
the worker's file changes ``kafleet.io/config-hash`` in the pod template, so the Deployment
rolls and no pod keeps running the old handler, topics or group beside new ones.

Does not own the pod itself (``pod_spec.py``: the worker, its native sidecar, probes,
security, resources, spread and volumes), applying them (``reconcile/applying.py``, ``kube.py``,
``observer.py``) or deciding replicas (``scaling.py``).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import yaml

from kafleet.config.model import TUNABLE_FIELDS
from kafleet_operator.policy.pod_spec import SIDECAR_PORT, pod_spec
from kafleet_operator.policy.pod_template import CONFIG_HASH as CONFIG_HASH  # the pods' annotation
from kafleet_operator.policy.pod_template import PodTemplate
from kafleet_operator.policy.spec import ParsedSpec

Obj = dict[str, Any]
# A rollout replaces a quarter of the fleet per step: 20 replicas roll in 4 steps rather than
# 20 (each step is a join and a leave: two rebalances), and no more than a quarter more pods
# run at once. maxUnavailable 0: the group never runs short of members.
ROLLOUT = {"maxSurge": "25%", "maxUnavailable": 0}


def config_hash(parsed: ParsedSpec) -> str:
    """A digest of the worker's file without the fields workers apply live (``TUNABLE_FIELDS``):
    it changes exactly when running workers would need a restart to take the new file."""
    data = {k: v for k, v in parsed.worker_file().items() if k not in TUNABLE_FIELDS}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def labels(name: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "kafleet-worker",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/managed-by": "kafleet-operator",
    }


def match_labels(name: str) -> dict[str, str]:
    """The labels that select a group's pods."""
    return {k: v for k, v in labels(name).items() if k != "app.kubernetes.io/managed-by"}


def selector(name: str) -> str:
    """The label selector of a group's pods, as the scale subresource reports it."""
    return ",".join(f"{k}={v}" for k, v in sorted(match_labels(name).items()))


def owner_reference(owner: Obj) -> Obj:
    meta = owner["metadata"]
    return {
        "apiVersion": owner.get("apiVersion", "kafleet.io/v1alpha1"),
        "kind": owner.get("kind", "ConsumerGroup"),
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _metadata(owner: Obj, name: str) -> Obj:
    return {
        "name": name,
        "namespace": owner["metadata"]["namespace"],
        "labels": labels(owner["metadata"]["name"]),
        "ownerReferences": [owner_reference(owner)],
    }


def config_map(owner: Obj, parsed: ParsedSpec, max_poll_records: int | None = None) -> Obj:
    """The worker's configuration file; ``max_poll_records`` is the tuned value, if any."""
    data = parsed.worker_file()
    if max_poll_records is not None:
        data["max_poll_records"] = max_poll_records
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(owner, f"{owner['metadata']['name']}-worker"),
        "data": {"worker.yaml": yaml.safe_dump(data, sort_keys=True)},
    }


def deployment(owner: Obj, parsed: ParsedSpec, replicas: int) -> Obj:
    name = owner["metadata"]["name"]
    template: PodTemplate = parsed.fleet.pod_template
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(owner, name),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": match_labels(name)},
            # A rolling update adds members before removing any (ROLLOUT); pods drain on
            # SIGTERM (kafleet worker).
            "strategy": {"type": "RollingUpdate", "rollingUpdate": dict(ROLLOUT)},
            "template": {
                "metadata": {
                    # The template's labels and annotations, under the operator's (the model
                    # refuses the selector's labels and the config hash).
                    "labels": {**template.metadata.labels, **labels(name)},
                    "annotations": {
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": str(SIDECAR_PORT),
                        **template.metadata.annotations,
                        CONFIG_HASH: config_hash(parsed),
                    },
                },
                "spec": pod_spec(parsed, name, match_labels(name)),
            },
        },
    }


def service(owner: Obj) -> Obj:
    name = owner["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(owner, f"{name}-metrics"),
        "spec": {
            # Headless: Prometheus scrapes the pods its Endpoints list, never a virtual IP, so
            # a thousand groups take a thousand Endpoints, not a thousand cluster IPs.
            "clusterIP": "None",
            "selector": match_labels(name),
            # A number: a named port of a native sidecar (an init container) reaches the
            # EndpointSlices only from Kubernetes 1.32 on (kubernetes#128850).
            "ports": [{"name": "metrics", "port": SIDECAR_PORT, "targetPort": SIDECAR_PORT}],
        },
    }
