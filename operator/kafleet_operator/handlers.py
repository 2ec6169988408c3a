"""The kopf handlers: reconcile a ConsumerGroup into its objects, then watch, scale and tune it.

Owns: kopf's settings (one startup handler), the level-based reconcile on create, update and
resume (parse the spec, server-side apply the ConfigMap, Deployment and Service the builders
make, report the outcome as status conditions), and one timer per resource that reads the
group's lag from Kafka, its pods' readiness from the Deployment and its handlers' figures from
the sidecars, then scales (``scaling.py``) and tunes (``tuning.py``), with an Event for every
decision. Server-side apply with one field manager makes every pass idempotent: applying what
is already there changes nothing, so a restarted operator leaves a right fleet alone.

Replicas: ``spec.replicas`` is the one source (the ``scale`` subresource writes it, so
``kubectl scale``, an HPA or KEDA work); internal autoscaling writes it the same way.

Does not own the objects' shape (``builders.py``) or the policies.
"""

from __future__ import annotations

import json
import logging
import os
import time
import urllib.request
from collections import deque
from collections.abc import Mapping
from typing import Any

import kopf
from confluent_kafka import KafkaException
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.dynamic import DynamicClient

from kafleet.errors import ConfigError
from kafleet_operator import builders, scaling, tuning
from kafleet_operator.crd import GROUP, PLURAL, VERSION
from kafleet_operator.lag_reader import read_lag, reader
from kafleet_operator.spec import ParsedSpec, parse_spec

log = logging.getLogger("kafleet.operator")
FIELD_MANAGER = "kafleet-operator"
# `kafleet operator --interval-s` and `--sidecar-url` set these (before this module loads).
INTERVAL_S = float(os.environ.get("KAFLEET_OPERATOR_INTERVAL_S", "5"))
SIDECAR_URL = os.environ.get("KAFLEET_OPERATOR_SIDECAR_URL", "http://{pod_ip}:8080")
_api: DynamicClient | None = None
_client: k8s.ApiClient | None = None


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    # Everything kopf writes on resources is named under kafleet.io, not kopf.zalando.org.
    settings.persistence.finalizer = "kafleet.io/finalizer"  # unused: owners' refs delete
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="kafleet.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="kafleet.io", key="last-handled-configuration"
    )
    # Watches end server-side after a minute and are re-established; a silent connection is
    # dropped after a minute and a half instead of hanging forever.
    settings.watching.server_timeout = 60
    settings.watching.client_timeout = 90
    settings.watching.connect_timeout = 10
    # Handler errors are retried with backoff, never faster than a second.
    settings.execution.max_workers = 8
    settings.networking.request_timeout = 30
    settings.posting.level = logging.INFO  # Events for what the operator decides


def client() -> k8s.ApiClient:
    """The operator's one API client: in-cluster, else the kubeconfig. Every call goes through
    it, not through whatever configuration kopf's login left in the library's globals."""
    global _client
    if _client is None:
        configuration = k8s.Configuration()
        try:
            k8s_config.load_incluster_config(configuration)  # type: ignore[no-untyped-call]
        except k8s_config.ConfigException:
            k8s_config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        _client = k8s.ApiClient(configuration)
    return _client


def api() -> DynamicClient:
    global _api
    if _api is None:
        _api = DynamicClient(client())  # type: ignore[no-untyped-call]
    return _api


def apply(obj: dict[str, Any]) -> dict[str, Any]:
    resource = api().resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    result = resource.server_side_apply(
        body=obj,
        name=obj["metadata"]["name"],
        namespace=obj["metadata"]["namespace"],
        field_manager=FIELD_MANAGER,
        force_conflicts=True,
    )
    return dict(result.to_dict())


def condition(kind: str, ok: bool, reason: str, message: str, generation: int) -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True" if ok else "False",
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _set_conditions(status: Mapping[str, Any], patch: kopf.Patch, *new: dict[str, Any]) -> None:
    """Merge conditions by type, keeping a transition time when the status did not change."""
    current = {c["type"]: c for c in status.get("conditions") or []}
    for cond in new:
        old = current.get(cond["type"])
        if old and old.get("status") == cond["status"]:
            cond = {**cond, "lastTransitionTime": old.get("lastTransitionTime")}
        current[cond["type"]] = cond
    patch.status["conditions"] = [current[k] for k in sorted(current)]


def _parse(body: kopf.Body, status: kopf.Status, patch: kopf.Patch) -> ParsedSpec | None:
    generation = body.metadata.get("generation", 0)
    try:
        return parse_spec(dict(body.spec))
    except ConfigError as exc:
        message = "; ".join(str(p) for p in exc.problems)
        _set_conditions(
            status,
            patch,
            condition("Degraded", True, "InvalidSpec", message, generation),
            condition("Ready", False, "InvalidSpec", message, generation),
            condition("Progressing", False, "InvalidSpec", "fix the spec", generation),
        )
        patch.status["observedGeneration"] = generation
        return None


def _owner(body: kopf.Body) -> dict[str, Any]:
    return {"apiVersion": body["apiVersion"], "kind": body["kind"], "metadata": dict(body.metadata)}


def effective_max_poll_records(parsed: ParsedSpec, status: Mapping[str, Any]) -> int:
    tuned = status.get("maxPollRecords")
    if parsed.fleet.tuning.enabled and isinstance(tuned, int):
        return tuned
    return parsed.worker.max_poll_records


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL)
def reconcile(body: kopf.Body, status: kopf.Status, patch: kopf.Patch, **_: Any) -> None:
    parsed = _parse(body, status, patch)
    if parsed is None:
        return
    owner = _owner(body)
    name = body.metadata["name"]
    generation = body.metadata.get("generation", 0)
    mpr = effective_max_poll_records(parsed, status)
    apply(builders.config_map(owner, parsed, mpr))
    deployment = apply(builders.deployment(owner, parsed, parsed.fleet.replicas))
    apply(builders.service(owner))
    patch.status["observedGeneration"] = generation
    patch.status["labelSelector"] = builders.selector(name)
    patch.status["maxPollRecords"] = mpr
    ready = (deployment.get("status") or {}).get("readyReplicas") or 0
    # Conditions are the timer's to write (it reads the freshest status): a list written from
    # this event's older copy of the status would drop what a timer pass set meanwhile.
    patch.status["appliedGeneration"] = generation
    patch.status["readyReplicas"] = ready


@kopf.timer(GROUP, VERSION, PLURAL, interval=INTERVAL_S, initial_delay=1.0)
def observe(
    body: kopf.Body,
    status: kopf.Status,
    patch: kopf.Patch,
    memo: Any,
    **_: Any,
) -> None:
    """Readiness from the Deployment, lag from Kafka; then scale and tune."""
    parsed = _parse(body, status, patch)
    if parsed is None:
        return
    name, namespace = body.metadata["name"], body.metadata["namespace"]
    generation = body.metadata.get("generation", 0)
    try:
        deployment = k8s.AppsV1Api(client()).read_namespaced_deployment_status(name, namespace)
    except k8s.ApiException as exc:
        if exc.status == 404:
            return  # not applied yet: the reconcile comes first
        raise
    replicas = deployment.spec.replicas or 0 if deployment.spec else 0
    observed = deployment.status or k8s.V1DeploymentStatus()
    ready = observed.ready_replicas or 0
    patch.status["replicas"] = observed.replicas or 0
    patch.status["readyReplicas"] = ready
    patch.status["labelSelector"] = builders.selector(name)
    applied = status.get("appliedGeneration")
    conditions = [
        condition(
            "Progressing",
            applied == generation,
            "Applied" if applied == generation else "Reconciling",
            f"Deployment, ConfigMap and Service applied for generation {generation}"
            if applied == generation
            else f"applying generation {generation} (last applied: {applied})",
            generation,
        ),
        condition(
            "Ready",
            ready >= replicas,
            "AllReplicasReady" if ready >= replicas else "ReplicasNotReady",
            f"{ready} of {replicas} replicas ready",
            generation,
        ),
    ]
    # Scaling starts from spec.replicas, the one source: the Deployment may lag behind it.
    wanted_now = parsed.fleet.replicas
    conditions.append(_observe_lag(body, parsed, status, patch, memo, wanted_now, generation))
    _set_conditions(status, patch, *conditions)
    _tune(body, parsed, status, patch, namespace, name)


def _observe_lag(
    body: kopf.Body,
    parsed: ParsedSpec,
    status: kopf.Status,
    patch: kopf.Patch,
    memo: Any,
    replicas: int,
    generation: int,
) -> dict[str, Any]:
    worker = parsed.worker
    if memo.get("reader_of") != (worker.bootstrap_servers, worker.group_id):
        if "reader" in memo:
            memo["reader"].close()
        memo["reader"] = reader(
            worker.bootstrap_servers, worker.group_id, worker.security.properties()
        )
        memo["reader_of"] = (worker.bootstrap_servers, worker.group_id)
        memo["ends"] = deque(maxlen=120)
        memo["wishes"] = deque(maxlen=2000)
    try:
        reading = read_lag(
            memo["reader"],
            list(worker.topics),
            worker.topic_pattern,
            worker.auto_offset_reset == "earliest",
        )
    except KafkaException as exc:
        return condition(
            "Degraded",
            True,
            "KafkaUnreachable",
            f"cannot read lag from bootstrap_servers {worker.bootstrap_servers}: {exc}",
            generation,
        )
    now = time.time()
    memo["ends"].append((now, reading.end_total))
    time_lag = scaling.time_lag_s(list(memo["ends"]), reading.committed_total, now)
    patch.status.update(
        {
            "lag": reading.total,
            "maxPartitionLag": reading.max_partition,
            "partitions": reading.partitions,
            "timeLagSeconds": round(time_lag or 0.0, 1),
        }
    )
    if reading.missing_topics:
        return condition(
            "Degraded",
            True,
            "TopicNotFound",
            f"topics {reading.missing_topics} (spec.topics) do not exist",
            generation,
        )
    policy = parsed.fleet.autoscaling
    if policy is not None and reading.partitions:
        wish = scaling.wanted(reading.total, reading.partitions, policy, time_lag, replicas)
        memo["wishes"].append((now, wish))
        decision = scaling.decide(replicas, list(memo["wishes"]), now, policy)
        if decision.changes:
            _scale(body, decision, reading.total, reading.partitions)
            patch.status["lastScaleTime"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            patch.status["lastScaleReason"] = decision.reason
    return condition("Degraded", False, "Observed", "lag read from Kafka", generation)


def _scale(body: kopf.Body, decision: scaling.Decision, lag: int, partitions: int) -> None:
    message = (
        f"replicas {body.spec.get('replicas', 1)} -> {decision.replicas}: lag {lag} "
        f"over {partitions} partitions"
    )
    k8s.CustomObjectsApi(client()).patch_namespaced_custom_object_scale(
        GROUP,
        VERSION,
        body.metadata["namespace"],
        PLURAL,
        body.metadata["name"],
        {"spec": {"replicas": decision.replicas}},
    )
    kopf.info(body, reason=decision.reason, message=message)
    log.info("%s/%s: %s", body.metadata["namespace"], body.metadata["name"], message)


def _sidecar_figures(namespace: str, name: str) -> tuple[float | None, int]:
    """Mean handler latency and concurrency over the ready pods' sidecars (their /status)."""
    pods = k8s.CoreV1Api(client()).list_namespaced_pod(
        namespace, label_selector=builders.selector(name)
    )
    latency_sum, count, concurrency = 0.0, 0, 0
    for pod in pods.items:
        ip = pod.status.pod_ip if pod.status else None
        if not ip:
            continue
        pod_name = pod.metadata.name if pod.metadata else ""
        url = SIDECAR_URL.format(pod_ip=ip, pod=pod_name) + "/status"
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                state = json.load(answer).get("worker") or {}
        except (OSError, ValueError):
            continue
        latency = state.get("handler_latency") or {}
        latency_sum += float(latency.get("sum", 0.0))
        count += sum(latency.get("counts", []))
        concurrency = max(concurrency, int(state.get("concurrency") or 0))
    return (latency_sum / count if count else None), concurrency


def _tune(
    body: kopf.Body,
    parsed: ParsedSpec,
    status: kopf.Status,
    patch: kopf.Patch,
    namespace: str,
    name: str,
) -> None:
    if not parsed.fleet.tuning.enabled:
        return
    latency, concurrency = _sidecar_figures(namespace, name)
    current = effective_max_poll_records(parsed, status)
    move = tuning.step(
        current,
        latency,
        concurrency or parsed.worker.concurrency,
        parsed.worker.drain_timeout_s,
        parsed.worker.queue.max_records,
        parsed.fleet.tuning,
    )
    if not move.changes:
        return
    owner = {
        "apiVersion": body["apiVersion"],
        "kind": body["kind"],
        "metadata": dict(body.metadata),
    }
    apply(builders.config_map(owner, parsed, move.max_poll_records))  # workers watch it
    patch.status["maxPollRecords"] = move.max_poll_records
    message = (
        f"max_poll_records {current} -> {move.max_poll_records}: handlers take "
        f"{(latency or 0) * 1000:.1f} ms at concurrency {concurrency}"
    )
    kopf.info(body, reason=move.reason, message=message)
    log.info("%s/%s: %s", namespace, name, message)
