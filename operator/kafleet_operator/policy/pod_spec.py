"""The pod a ``ConsumerGroup``'s Deployment runs, as a pure function of its parsed spec.

Owns: the worker container (``kafleet worker`` on the mounted configuration, secrets as
environment variables from Secrets, each pod's name as its static membership id, default
requests, probes that the sidecar answers), the native sidecar (an init container that always
restarts, so the kubelet stops it only after the worker has drained) serving probes and
metrics from the shared state file, restricted pod security, a termination grace period that
covers the worker's drain, a spread over zones and nodes, the operator's volumes, and the
user's ``pod_template`` merged in (volumes, env and mounts appended, pod-level fields taken).
No I/O.

Does not own the Deployment around the pod (its metadata, labels, selector, rollout and config
hash), the ConfigMap the pod mounts or the metrics Service (``builders.py``), nor the
template's shape (``pod_template.py``).
"""

from __future__ import annotations

import copy
from typing import Any

from kafleet_operator.policy.pod_template import (
    CONFIG_DIR,
    STATE_DIR,
    TMP_DIR,
    ContainerTemplate,
    PodTemplate,
)
from kafleet_operator.policy.spec import STATE_FILE, ParsedSpec

SIDECAR_PORT = 8080
Obj = dict[str, Any]
# Requests of a worker whose spec gives none. Without requests a pod is BestEffort: the first
# evicted when its node runs short, and placed with no regard for what it uses. 100m and 256Mi
# cover an idle worker (Python, librdkafka and its fetch buffers, the queue) with room for a
# light handler; a heavier handler says so in resources.requests.
DEFAULT_REQUESTS = {"cpu": "100m", "memory": "256Mi"}
SPREAD_KEYS = ("topology.kubernetes.io/zone", "kubernetes.io/hostname")


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


def _spread(selector: dict[str, str]) -> list[Obj]:
    """Spread a group's pods over zones, then nodes, so one zone's or node's loss takes few
    members. The scheduler's built-in default (skew 5 over zones) lets a small fleet sit in one
    zone; ScheduleAnyway keeps pods schedulable where nodes have no zone label. Counted per
    revision (pod-template-hash), so a rollout's new pods spread among themselves."""
    return [
        {
            "maxSkew": 1,
            "topologyKey": key,
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": dict(selector)},
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


def pod_spec(parsed: ParsedSpec, name: str, selector: dict[str, str]) -> Obj:
    """The pod of the group ``name`` (its ConfigMap is ``<name>-worker``); ``selector``: the
    labels that select the group's pods (``builders.match_labels``)."""
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
    pod: Obj = {
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
            _spread(selector)
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
    if not pod["topologySpreadConstraints"]:
        del pod["topologySpreadConstraints"]
    return pod
