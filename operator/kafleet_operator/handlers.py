"""The kopf handlers: reconcile a ConsumerGroup into its objects, and keep observing it.

Owns: kopf's settings (one startup handler), the level-based reconcile on create, update and
resume (parse the spec, server-side apply the ConfigMap, Deployment and Service the builders
make; an apply the API server refuses is recorded in ``status.applyFailure`` with its message,
then retried with backoff if the server failed, or left for an edit if it judged the objects
wrong), an index of every watched group, and starting and stopping the periodic pass over
them (``periodic.py`` runs ``observer.observe_group`` for each: conditions, lag, scaling,
tuning). Server-side apply with one field manager makes every reconcile idempotent: applying
what is already there changes nothing, so a restarted operator leaves a right fleet alone.

No finalizer: nothing has to happen before a ConsumerGroup goes (owner references take its
objects with it), and no handler asks kopf for one (no ``on.delete``, no timer or daemon), so
a group is deleted at once even while the operator is down.

Replicas: ``spec.replicas`` is the one source (the ``scale`` subresource writes it, so
``kubectl scale``, an HPA or KEDA work); internal autoscaling writes it the same way.

Does not own the objects' shape (``builders.py``), what a pass does (``observer.py``) or the
policies.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import os
from typing import Any, NoReturn

import kopf
from kubernetes import client as k8s

from kafleet_operator import builders, observer, periodic, tuner
from kafleet_operator.crd import GROUP, PLURAL, VERSION
from kafleet_operator.kube import api_message, apply

log = logging.getLogger("kafleet.operator")
# `kafleet operator --interval-s` sets this (before this module loads).
INTERVAL_S = float(os.environ.get("KAFLEET_OPERATOR_INTERVAL_S", "5"))
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
    pass_ = periodic.run(kwargs["groups"], observer.observe_group, INTERVAL_S)  # the index above
    memo["observing"] = asyncio.get_running_loop().create_task(pass_)


@kopf.on.cleanup()
async def stop_observing(memo: kopf.Memo, **_: Any) -> None:
    task = memo.get("observing")
    if task is not None:
        task.cancel()


def _owner(body: kopf.Body) -> dict[str, Any]:
    return {"apiVersion": body["apiVersion"], "kind": body["kind"], "metadata": dict(body.metadata)}


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL)
def reconcile(
    body: kopf.Body, status: kopf.Status, patch: kopf.Patch, retry: int, **_: Any
) -> None:
    parsed = observer.parse(body, status, patch)
    if parsed is None:
        return
    owner = _owner(body)
    name = body.metadata["name"]
    generation = body.metadata.get("generation", 0)
    mpr = tuner.effective_max_poll_records(parsed, status)
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
    delay = apply_retry_delay(exc.status or 0, retry)
    if delay is None:
        raise kopf.PermanentError(f"refused by the API server: {message}") from exc
    raise kopf.TemporaryError(message, delay=delay) from exc


def apply_retry_delay(status_code: int, retry: int) -> float | None:
    """When to apply again after the API server refused: None (wait for an edit) when it
    judged the objects wrong; the longest backoff when the operator may not (401, 403: an RBAC
    grant may come later) or the namespace is going (404); else backoff from the first delay."""
    first, most = APPLY_BACKOFF_S
    if status_code in (401, 403, 404):
        return float(most)
    if 400 <= status_code < 500 and status_code not in (408, 409, 429):
        return None
    return float(min(most, first * 2**retry))
