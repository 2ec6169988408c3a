"""The objects a ``ConsumerGroup`` owns, as pure functions of its parsed spec.

Owns: the desired Deployment (a worker container running ``kafleet worker`` on the mounted
configuration, a native sidecar (an init container that always restarts, so the kubelet stops
it only after the worker has drained) serving probes and metrics from the shared state file,
secrets as environment variables from Secrets, each pod's name as its static membership id,
restricted pod security, a termination grace period that covers the worker's drain, default
requests, a spread over zones and nodes, a rollout in steps of a quarter of the fleet, and the
user's ``pod_template`` merged in: metadata merged, volumes, env and mounts appended), the
ConfigMap (the worker's validated configuration as YAML: the worker watches it, so tuning
changes apply without a restart) and the metrics Service; their names, labels, selector and
owner references. No I/O: every case is tested
without a cluster.

A change that touches only live-tunable values (``max_poll_records``, ``concurrency``) changes
only the ConfigMap, never the pod template, so no pod restarts for tuning. Any other change of
the worker's file changes ``kafleet.io/config-hash`` in the pod template, so the Deployment
rolls and no pod keeps running the old handler, topics or group beside new ones.

Does not own applying them (``kube.py``, ``handlers.py``, ``observer.py``) or deciding
replicas (``scaling.py``).
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

import yaml

from kafleet.config import TUNABLE_FIELDS
from kafleet_operator.pod_template import (
    CONFIG_DIR,
    STATE_DIR,
    TMP_DIR,
    ContainerTemplate,
    PodTemplate,
)
from kafleet_operator.pod_template import CONFIG_HASH as CONFIG_HASH  # the pods' annotation
from kafleet_operator.spec import STATE_FILE, ParsedSpec

SIDECAR_PORT = 8080
Obj = dict[str, Any]
# Requests of a worker whose spec gives none. Without requests a pod is BestEffort: the first
# evicted when its node runs short, and placed with no regard for what it uses. 100m and 256Mi
# cover an idle worker (Python, librdkafka and its fetch buffers, the queue) with room for a
# light handler; a heavier handler says so in resources.requests.
DEFAULT_REQUESTS = {"cpu": "100m", "memory": "256Mi"}
# A rollout replaces a quarter of the fleet per step: 20 replicas roll in 4 steps rather than
# 20 (each step is a join and a leave: two rebalances), and no more than a quarter more pods
# run at once. maxUnavailable 0: the group never runs short of members.
ROLLOUT = {"maxSurge": "25%", "maxUnavailable": 0}
SPREAD_KEYS = ("topology.kubernetes.io/zone", "kubernetes.io/hostname")


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


def _secret_env(parsed: ParsedSpec) -> list[Obj]:
    env = []
    security = parsed.fleet.security
    for variable, ref in (
        ("KAFLEET_SECURITY__SASL_PASSWORD", security.sasl_password_secret),
        ("KAFLEET_SECURITY__SSL_KEY_PASSWORD", security.ssl_key_password_secret),
    ):
        if ref is not None:
            env.append(
                {
                    "name": variable,
                    "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}},
                }
            )
    return env


def _member_env(parsed: ParsedSpec) -> list[Obj]:
    """Static membership: the pod's name is the worker's ``group_instance_id`` (the worker reads
    ``KAFLEET_*`` variables over its file), unique per pod and kept across container restarts."""
    if not parsed.fleet.static_membership:
        return []
    return [
        {
            "name": "KAFLEET_GROUP_INSTANCE_ID",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
        }
    ]


IMAGE_USER = 65532  # the Dockerfile's USER: non-root, as in distroless images

RESTRICTED = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def _resources(parsed: ParsedSpec) -> Obj:
    """The worker's resources; with no requests given, ``DEFAULT_REQUESTS`` for each resource
    that has no limit either (Kubernetes requests a limit's value when only it is given)."""
    given = {k: dict(v) for k, v in parsed.fleet.resources.model_dump().items() if v}
    if not given.get("requests"):
        limits = given.get("limits", {})
        defaults = {k: v for k, v in DEFAULT_REQUESTS.items() if k not in limits}
        if defaults:
            given["requests"] = defaults
    return given


def _spread(name: str) -> list[Obj]:
    """Spread a group's pods over zones, then nodes, so one zone's or node's loss takes few
    members. The scheduler's built-in default (skew 5 over zones) lets a small fleet sit in one
    zone; ScheduleAnyway keeps pods schedulable where nodes have no zone label. Counted per
    revision (pod-template-hash), so a rollout's new pods spread among themselves."""
    return [
        {
            "maxSkew": 1,
            "topologyKey": key,
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": match_labels(name)},
            "matchLabelKeys": ["pod-template-hash"],
        }
        for key in SPREAD_KEYS
    ]


def _with(container: Obj, extra: ContainerTemplate) -> Obj:
    """A container with the template's env, envFrom and volumeMounts appended to its own."""
    added = extra.model_dump(mode="json", exclude_none=True)
    for field in ("env", "envFrom", "volumeMounts"):
        if added[field]:
            container[field] = [*container.get(field, []), *added[field]]
    return container


def _probe(path: str, period: int, failures: int) -> Obj:
    """A probe of the worker container that the sidecar answers (its verdict on the worker's
    state). The kubelet restarts the container whose probe fails, so it sits on the worker; the
    port is a number, since a named port is looked up only in the probed container."""
    return {
        "httpGet": {"path": path, "port": SIDECAR_PORT},
        "periodSeconds": period,
        "failureThreshold": failures,
        "timeoutSeconds": 2,
    }


def deployment(owner: Obj, parsed: ParsedSpec, replicas: int) -> Obj:
    name = owner["metadata"]["name"]
    fleet, worker = parsed.fleet, parsed.worker
    template: PodTemplate = fleet.pod_template
    worker_container: Obj = {
        "name": "worker",
        "image": fleet.image,
        # `command` names the program, whatever the image's entrypoint (kafleet's own is
        # `kafleet`; a handler's image built from a plain Python base may have none).
        "command": ["kafleet"],
        "args": ["worker", "--config", f"{CONFIG_DIR}/worker.yaml"],
        "env": _secret_env(parsed) + _member_env(parsed),
        "resources": _resources(parsed),
        # A hung poller or a handler past processing_timeout_s restarts the worker itself.
        "livenessProbe": _probe("/healthz", 10, 3),
        "readinessProbe": _probe("/readyz", 5, 2),
        "securityContext": copy.deepcopy(RESTRICTED),
        "volumeMounts": [
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "state", "mountPath": STATE_DIR},
            {"name": "tmp", "mountPath": TMP_DIR},
        ],
    }
    sidecar: Obj = {
        "name": "sidecar",
        "image": fleet.sidecar_image or fleet.image,
        "command": ["kafleet"],
        "args": [
            "sidecar",
            "--state-file",
            STATE_FILE,
            "--port",
            str(SIDECAR_PORT),
            "--partition-metrics",
            "on" if fleet.partition_metrics else "off",
        ],
        # A native sidecar (an init container that always restarts): it starts before the
        # worker and the kubelet stops it only once the worker has exited, so the drain's
        # figures are served until the end (a plain container got SIGTERM with the worker).
        "restartPolicy": "Always",
        "ports": [{"name": "metrics", "containerPort": SIDECAR_PORT}],
        # Its own probe says only that its server answers: the worker's health is not its own.
        "livenessProbe": {"tcpSocket": {"port": SIDECAR_PORT}, "periodSeconds": 10},
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}},
        "securityContext": copy.deepcopy(RESTRICTED),
        "volumeMounts": [{"name": "state", "mountPath": STATE_DIR}],
    }
    pod_spec: Obj = {
        **template.pod_fields(),
        "initContainers": [_with(sidecar, template.sidecar)],
        "containers": [_with(worker_container, template.worker)],
        # The drain (shutdown_grace_s) and a margin for the last commit and the group leave.
        "terminationGracePeriodSeconds": int(worker.shutdown_grace_s) + 15,
        # The sidecar sees the worker's process: "process N is gone" beats a stale file.
        "shareProcessNamespace": True,
        # Workers never call the Kubernetes API: no token in their pods.
        "automountServiceAccountToken": False,
        # kafleet's image user; fsGroup makes the emptyDirs writable for it.
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": IMAGE_USER,
            "runAsGroup": IMAGE_USER,
            "fsGroup": IMAGE_USER,
        },
        "topologySpreadConstraints": (
            _spread(name)
            if template.topologySpreadConstraints is None
            else copy.deepcopy(template.topologySpreadConstraints)
        ),
        "volumes": [
            {"name": "config", "configMap": {"name": f"{name}-worker"}},
            {"name": "state", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
            *copy.deepcopy(template.volumes),
        ],
    }
    if not pod_spec["topologySpreadConstraints"]:
        del pod_spec["topologySpreadConstraints"]
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
                "spec": pod_spec,
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
