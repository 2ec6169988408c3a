"""One periodic pass over one ConsumerGroup: observe it, write its status, scale, tune.

Owns: what a pass does (``periodic.py`` runs one per group every interval): validate the spec
(an invalid one is reported ``InvalidSpec`` naming the fields), read the Deployment's
readiness (its absence too), the group's lag from Kafka (connecting as the workers do, with
the passwords of the Secrets the spec names) and the handlers' figures from the sidecars;
judge the conditions (``conditions.py``) from those facts and an apply the API server refused
(``status.applyFailure``, recorded by the reconcile); write the status in one merge patch;
then scale (``scaling.py``, through the ``scale`` subresource, as ``kubectl scale`` and an HPA
do) and tune ``max_poll_records`` (``tuning.py``, through the ConfigMap the workers watch),
with an Event for every decision.

Does not own when passes run (``periodic.py``), the kopf handlers (``handlers.py``) or the
policies.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import time
import urllib.request
from collections import deque
from collections.abc import Mapping
from typing import Any, cast

import kopf
from confluent_kafka import KafkaException
from kubernetes import client as k8s

from kafleet.errors import ConfigError
from kafleet_operator import builders, conditions, credentials, lag_reader, scaling, tuning
from kafleet_operator.conditions import condition
from kafleet_operator.crd import GROUP, PLURAL, VERSION
from kafleet_operator.kube import apply, client, patch_status, post_event
from kafleet_operator.spec import ParsedSpec, parse_spec

log = logging.getLogger("kafleet.operator")
# `kafleet operator --sidecar-url` sets this (before this module loads).
SIDECAR_URL = os.environ.get("KAFLEET_OPERATOR_SIDECAR_URL", "http://{pod_ip}:8080")


def _set_conditions(status: Mapping[str, Any], patch: kopf.Patch, *new: dict[str, Any]) -> None:
    patch.status["conditions"] = conditions.merged(status.get("conditions"), new)


def parse(body: kopf.Body, status: kopf.Status, patch: kopf.Patch) -> ParsedSpec | None:
    generation = body.metadata.get("generation", 0)
    try:
        return parse_spec(dict(body.spec))
    except ConfigError as exc:
        message = "; ".join(str(p) for p in exc.problems)
        facts = conditions.Facts(generation, invalid=message)
        _set_conditions(status, patch, *conditions.judge(facts))
        patch.status["observedGeneration"] = generation
        return None


def effective_max_poll_records(parsed: ParsedSpec, status: Mapping[str, Any]) -> int:
    tuned = status.get("maxPollRecords")
    if parsed.fleet.tuning.enabled and isinstance(tuned, int):
        return tuned
    return parsed.worker.max_poll_records


def observe_group(raw: Mapping[str, Any], memo: dict[str, Any]) -> None:
    """One periodic pass over one group (``periodic.run`` calls it): observe, write status."""
    body = kopf.Body(cast(kopf.RawBody, copy.deepcopy(dict(raw))))
    patch = kopf.Patch()
    observe(body, body.status, patch, memo)
    if patch.get("status"):
        try:
            patch_status(body, patch["status"])
        except k8s.ApiException as exc:
            if exc.status != 404:
                raise
            log.info("%s/%s is gone", body.metadata["namespace"], body.metadata["name"])


def observe(
    body: kopf.Body,
    status: kopf.Status,
    patch: kopf.Patch,
    memo: Any,
    **_: Any,
) -> None:
    """Readiness from the Deployment, lag from Kafka, the conditions; then scale and tune."""
    parsed = parse(body, status, patch)
    if parsed is None:
        return
    name, namespace = body.metadata["name"], body.metadata["namespace"]
    generation = body.metadata.get("generation", 0)
    failure = status.get("applyFailure") or {}
    refused = failure.get("message") if failure.get("generation") == generation else None
    try:
        deployment = k8s.AppsV1Api(client()).read_namespaced_deployment_status(name, namespace)
    except k8s.ApiException as exc:
        if exc.status != 404:
            raise
        deployment = None  # not applied yet, or refused: the conditions say which
    replicas: int | None = None
    observed = k8s.V1DeploymentStatus()
    if deployment is not None:
        replicas = deployment.spec.replicas or 0 if deployment.spec else 0
        observed = deployment.status or observed
    ready = observed.ready_replicas or 0
    patch.status["replicas"] = observed.replicas or 0
    patch.status["readyReplicas"] = ready
    patch.status["labelSelector"] = builders.selector(name)
    # Scaling starts from spec.replicas, the one source: the Deployment may lag behind it.
    lag = _observe_lag(body, parsed, status, patch, memo, parsed.fleet.replicas, generation)
    applied = status.get("appliedGeneration")
    facts = conditions.Facts(generation, None, refused, applied, replicas, ready, lag)
    _set_conditions(status, patch, *conditions.judge(facts))
    if deployment is not None:
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
        memo["reader_of"] = (worker.bootstrap_servers, worker.group_id)
        memo["ends"] = deque(maxlen=120)
        memo["wishes"] = deque(maxlen=2000)
    # The client connects as the workers do: their security, passwords from their Secrets.
    if "reader" not in memo:
        memo["reader"] = lag_reader.LagReader()
        memo["secrets"] = credentials.Credentials(credentials.secret_reader(client()))
    reader, secrets = memo["reader"], memo["secrets"]
    try:
        security = secrets.get(parsed.fleet.security, body.metadata["namespace"])
        reading = reader.read(
            worker.bootstrap_servers,
            worker.group_id,
            security,
            list(worker.topics),
            worker.topic_pattern,
            worker.auto_offset_reset == "earliest",
        )
    except credentials.CredentialsError as exc:
        return condition("Degraded", True, exc.reason, f"cannot read lag: {exc}", generation)
    except KafkaException as exc:
        if lag_reader.is_authentication_failure(exc):
            secrets.forget()  # the next pass reads the Secrets again: they may be rotated
            return condition(
                "Degraded",
                True,
                "KafkaAuthenticationFailed",
                f"bootstrap_servers {worker.bootstrap_servers} refused the credentials of "
                f"spec.security: {lag_reader.describe(exc)}",
                generation,
            )
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
    post_event(body, decision.reason, message)
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
    post_event(body, move.reason, message)
    log.info("%s/%s: %s", namespace, name, message)
