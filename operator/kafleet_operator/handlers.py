"""The kopf handlers: reconcile a ConsumerGroup into its objects, then watch, scale and tune it.

Owns: kopf's settings (one startup handler), the level-based reconcile on create, update and
resume (parse the spec, server-side apply the ConfigMap, Deployment and Service the builders
make; a refused apply is recorded with the API server's message), and the periodic pass over
every group (``periodic.py`` runs it) that reads the group's lag from Kafka, its pods'
readiness from the Deployment and its handlers' figures from the sidecars, writes the
conditions (``conditions.py``), then scales (``scaling.py``) and tunes (``tuning.py``), with
an Event for every decision. Server-side apply with one field manager makes every pass
idempotent: applying what is already there changes nothing, so a restarted operator leaves a
right fleet alone.

No finalizer: nothing has to happen before a ConsumerGroup goes (owner references take its
objects with it), and no handler asks kopf for one (no ``on.delete``, no timer or daemon), so
a group is deleted at once even while the operator is down.

Replicas: ``spec.replicas`` is the one source (the ``scale`` subresource writes it, so
``kubectl scale``, an HPA or KEDA work); internal autoscaling writes it the same way.

Does not own the objects' shape (``builders.py``) or the policies.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import os
import time
import urllib.request
from collections import deque
from collections.abc import Mapping
from typing import Any, NoReturn, cast

import kopf
from confluent_kafka import KafkaException
from kubernetes import client as k8s

from kafleet.errors import ConfigError
from kafleet_operator import (
    builders,
    conditions,
    credentials,
    lag_reader,
    periodic,
    scaling,
    tuning,
)
from kafleet_operator.conditions import condition
from kafleet_operator.crd import GROUP, PLURAL, VERSION
from kafleet_operator.kube import api_message, apply, client, patch_status, post_event
from kafleet_operator.spec import ParsedSpec, parse_spec

log = logging.getLogger("kafleet.operator")
# `kafleet operator --interval-s` and `--sidecar-url` set these (before this module loads).
INTERVAL_S = float(os.environ.get("KAFLEET_OPERATOR_INTERVAL_S", "5"))
SIDECAR_URL = os.environ.get("KAFLEET_OPERATOR_SIDECAR_URL", "http://{pod_ip}:8080")
# A failed apply is retried after this many seconds, doubling up to the last (a 5xx only: a
# refusal (4xx) waits for an edit of the spec, which runs the reconcile again at once).
APPLY_BACKOFF_S = (5.0, 60.0)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    # Everything kopf writes on resources is named under kafleet.io, not kopf.zalando.org.
    # No handler needs a finalizer; kopf removes this one from groups an older operator marked.
    settings.persistence.finalizer = "kafleet.io/finalizer"
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


@kopf.index(GROUP, VERSION, PLURAL)
def groups(body: kopf.Body, **_: Any) -> dict[tuple[str, str], dict[str, Any]]:
    """Every watched ConsumerGroup as last seen, for the periodic pass (gone when deleted)."""
    meta = body.metadata
    return {(meta["namespace"], meta["name"]): copy.deepcopy(dict(body))}


@kopf.on.startup()
async def start_observing(memo: kopf.Memo, **kwargs: Any) -> None:
    pass_ = periodic.run(kwargs["groups"], observe_group, INTERVAL_S)  # the index above
    memo["observing"] = asyncio.get_running_loop().create_task(pass_)


@kopf.on.cleanup()
async def stop_observing(memo: kopf.Memo, **_: Any) -> None:
    task = memo.get("observing")
    if task is not None:
        task.cancel()


def _set_conditions(status: Mapping[str, Any], patch: kopf.Patch, *new: dict[str, Any]) -> None:
    patch.status["conditions"] = conditions.merged(status.get("conditions"), new)


def _parse(body: kopf.Body, status: kopf.Status, patch: kopf.Patch) -> ParsedSpec | None:
    generation = body.metadata.get("generation", 0)
    try:
        return parse_spec(dict(body.spec))
    except ConfigError as exc:
        message = "; ".join(str(p) for p in exc.problems)
        facts = conditions.Facts(generation, invalid=message)
        _set_conditions(status, patch, *conditions.judge(facts))
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
def reconcile(
    body: kopf.Body, status: kopf.Status, patch: kopf.Patch, retry: int, **_: Any
) -> None:
    parsed = _parse(body, status, patch)
    if parsed is None:
        return
    owner = _owner(body)
    name = body.metadata["name"]
    generation = body.metadata.get("generation", 0)
    mpr = effective_max_poll_records(parsed, status)
    try:
        apply(builders.config_map(owner, parsed, mpr))
        deployment = apply(builders.deployment(owner, parsed, parsed.fleet.replicas))
        apply(builders.service(owner))
    except k8s.ApiException as exc:
        _refused(body, patch, exc, generation, retry)
    patch.status["applyFailure"] = None
    patch.status["observedGeneration"] = generation
    patch.status["labelSelector"] = builders.selector(name)
    patch.status["maxPollRecords"] = mpr
    ready = (deployment.get("status") or {}).get("readyReplicas") or 0
    # Conditions are the periodic pass's to write (it reads the freshest status): a list written
    # from this event's older copy of the status would drop what a pass set meanwhile.
    patch.status["appliedGeneration"] = generation
    patch.status["readyReplicas"] = ready


def _refused(
    body: kopf.Body, patch: kopf.Patch, exc: k8s.ApiException, generation: int, retry: int
) -> NoReturn:
    """Record the API server's refusal for the periodic pass (it writes Degraded with the
    message); then retry with backoff if the server failed, or wait for an edit if it judged
    the objects wrong (an edit runs the reconcile again at once)."""
    message = api_message(exc)
    patch.status["applyFailure"] = {"generation": generation, "message": message}
    patch.status["observedGeneration"] = generation
    kopf.warn(body, reason="ApplyFailed", message=message)
    status_code = exc.status or 0
    if 400 <= status_code < 500 and status_code not in (408, 409, 429):
        raise kopf.PermanentError(f"refused by the API server: {message}") from exc
    first, most = APPLY_BACKOFF_S
    raise kopf.TemporaryError(message, delay=min(most, first * 2**retry)) from exc


def observe_group(raw: Mapping[str, Any], memo: dict[str, Any]) -> None:
    """One periodic pass over one group (``periodic.run`` calls it): observe, write status."""
    body = kopf.Body(cast(kopf.RawBody, copy.deepcopy(dict(raw))))
    patch = kopf.Patch()
    observe(body, body.status, patch, memo)
    if patch.get("status"):
        patch_status(body, patch["status"])


def observe(
    body: kopf.Body,
    status: kopf.Status,
    patch: kopf.Patch,
    memo: Any,
    **_: Any,
) -> None:
    """Readiness from the Deployment, lag from Kafka, the conditions; then scale and tune."""
    parsed = _parse(body, status, patch)
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
