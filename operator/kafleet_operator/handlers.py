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
``kubectl scale``, an HPA or KEDA work); internal autoscaling writes it the same way. While
``kafleet.io/paused-replicas`` is set the Deployment is held at that count instead, and while
``kafleet.io/pause-reconciliation`` is true nothing is applied (``pause.py``). kopf never
runs the update handler for those annotations: it leaves every annotation under its storage
prefix (``kafleet.io/``) out of the diff (``AnnotationsProgressStorage.clear``, and the
``kafleet.io/kopf-managed`` marker), even one registered as a field. So ``pause_changed``
watches every event of a group and applies its objects when what the annotations pause
differs from what this process last saw (in either direction).

Owned objects: every Deployment, ConfigMap and Service labelled managed-by kafleet-operator is
watched (a server-side label selector); one deleted, or changed by someone other than this
process, is put back from its group (``owned.py``), so a deleted fleet comes back at once and a
hand edit of the image, the probes or the replicas is reverted. An object of the same name
that the group does not control is never taken over: the reconcile records ``NotOwned``
naming it (``Degraded``) and retries with backoff, so the name is taken once it is free.

Does not own the objects' shape (``builders.py``), what a pass does (``observer.py``) or the
policies.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
import os
from typing import Any, NoReturn

import kopf
import urllib3
from kubernetes import client as k8s

from kafleet.errors import ConfigError
from kafleet_operator import (
    autoscaler,
    builders,
    kube,
    metrics,
    observer,
    owned,
    pause,
    periodic,
    tuner,
    watched,
)
from kafleet_operator.crd import GROUP, PLURAL, VERSION
from kafleet_operator.kube import api_message, apply
from kafleet_operator.spec import ParsedSpec, parse_spec

log = logging.getLogger("kafleet.operator")
# `kafleet operator --interval-s` sets this (before this module loads).
INTERVAL_S = float(os.environ.get("KAFLEET_OPERATOR_INTERVAL_S", "5"))
# A failed apply is retried after this many seconds, doubling up to the last (a 5xx only: a
# refusal (4xx) waits for an edit of the spec, which runs the reconcile again at once).
APPLY_BACKOFF_S = (5.0, 60.0)
MANAGED = watched.MANAGED
OWNED = (("apps", "v1", "deployments"), ("v1", "configmaps"), ("v1", "services"))


class QuietWatchers(logging.Filter):
    """Leaves out kopf's "Handler 'x' succeeded." for the event handlers that run on every
    status write and every event of an owned object (a dozen lines a minute per idle group);
    what they do, they log themselves."""

    NOISY = tuple(f"Handler '{name}' succeeded." for name in ("pause_changed", "put_back"))

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() not in self.NOISY


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    logging.getLogger("kopf.objects").addFilter(QuietWatchers())
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
    # The reconciles' threads (sync handlers): a thousand groups resume in seconds with four.
    settings.execution.max_workers = 4
    settings.networking.request_timeout = 30
    settings.posting.level = logging.INFO  # Events for what the operator decides
    # The owned objects are watched for deletions and hand edits: only ours, filtered by the
    # API server (not every Deployment, ConfigMap and Service of the watched namespaces).
    selector = ",".join(f"{k}={v}" for k, v in MANAGED.items())
    for resource in (*OWNED, ("v1", "pods")):  # and the pods, for their sidecars' addresses
        settings.watching.label_selectors[resource] = selector


@kopf.index(GROUP, VERSION, PLURAL)
async def groups(body: kopf.Body, **_: Any) -> dict[tuple[str, str], dict[str, Any]]:
    """Every watched ConsumerGroup as last seen, for the periodic pass (gone when deleted)."""
    meta = body.metadata
    kept = copy.deepcopy(dict(body))
    kept["metadata"].pop("managedFields", None)  # the bulk of an object, and never read
    return {(meta["namespace"], meta["name"]): kept}


@kopf.on.startup()
async def start_observing(memo: kopf.Memo, **kwargs: Any) -> None:
    watched.bind(**{name: kwargs[name] for name in ("deployments", "config_maps", "pods")})
    groups = kwargs["groups"]  # the index above
    pass_ = periodic.run(
        groups,
        observer.observe_group,
        autoscaler.target,
        INTERVAL_S,
        observed=_reconciled.__contains__,
    )
    memo["observing"] = asyncio.get_running_loop().create_task(pass_)


@kopf.on.cleanup()
async def stop_observing(memo: kopf.Memo, **_: Any) -> None:
    task = memo.get("observing")
    if task is not None:
        task.cancel()


# The groups this process has reconciled (created, updated or resumed): the periodic pass
# observes only those. kopf resumes a group only once its indexes are filled, so a pass never
# reads a half-listed index (and takes a Deployment not yet seen for one deleted).
_reconciled: set[str] = set()


def _owner(body: kopf.Body) -> dict[str, Any]:
    return {"apiVersion": body["apiVersion"], "kind": body["kind"], "metadata": dict(body.metadata)}


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL)
def reconcile(
    body: kopf.Body, status: kopf.Status, patch: kopf.Patch, retry: int, **_: Any
) -> None:
    namespace, name = body.metadata["namespace"], body.metadata["name"]
    _reconciled.add(body.metadata["uid"])
    parsed = observer.parse(body, status, patch)
    if parsed is None:
        metrics.reconciled(namespace, name, "invalid")
        return
    held = pause.read(body.metadata)
    if held.reconciliation:  # the pass says ReconciliationPaused; resuming runs this again
        log.info("%s: %s is true: nothing applied", name, pause.PAUSE_RECONCILIATION)
        metrics.reconciled(namespace, name, "paused")
        return
    try:
        deployment = _apply_all(body, parsed, held)
    except (kube.NotOwnedError, k8s.ApiException) as exc:
        metrics.reconciled(namespace, name, "refused")
        _refused(body, patch, exc, retry)
    _applied(body, patch, deployment)
    metrics.reconciled(namespace, name, "applied")


def _apply_all(body: kopf.Body, parsed: ParsedSpec, held: pause.Pause) -> dict[str, Any]:
    """Apply the group's ConfigMap, Deployment and Service; the Deployment as applied."""
    owner = _owner(body)
    # The one writer of the ConfigMap (with the pass's tuner): from the live one, under a
    # lock per group, so this event's older copy of the status never undoes a tuning.
    tuner.apply_config_map(body, parsed)
    deployment = apply(
        builders.deployment(owner, parsed, held.deployment_replicas(parsed.fleet.replicas))
    )
    owned.apply_service(owner)
    return deployment


def _applied(body: kopf.Body, patch: kopf.Patch, deployment: dict[str, Any]) -> None:
    generation = body.metadata.get("generation", 0)
    patch.status["applyFailure"] = None
    patch.status["observedGeneration"] = generation
    patch.status["labelSelector"] = builders.selector(body.metadata["name"])
    ready = (deployment.get("status") or {}).get("readyReplicas") or 0
    # Conditions are the periodic pass's to write (it reads the freshest status): a list written
    # from this event's older copy of the status would drop what a pass set meanwhile.
    patch.status["appliedGeneration"] = generation
    patch.status["readyReplicas"] = ready


def _failure(body: kopf.Body, patch: kopf.Patch, exc: k8s.ApiException | kube.NotOwnedError) -> str:
    """Record a refusal for the periodic pass (it writes Degraded with the message): the API
    server's (ApplyFailed), or the operator's own of an object it does not own (NotOwned)."""
    generation = body.metadata.get("generation", 0)
    if isinstance(exc, kube.NotOwnedError):
        reason, message = "NotOwned", str(exc)
    else:
        reason, message = "ApplyFailed", api_message(exc)
    patch.status["applyFailure"] = {"generation": generation, "message": message, "reason": reason}
    patch.status["observedGeneration"] = generation
    kopf.warn(body, reason=reason, message=message)
    return message


def _refused(
    body: kopf.Body, patch: kopf.Patch, exc: k8s.ApiException | kube.NotOwnedError, retry: int
) -> NoReturn:
    """Record the refusal (``_failure``); then retry with backoff if the server failed or the
    name is someone else's (it may be freed), or wait for an edit if the API server judged
    the objects wrong (an edit runs the reconcile again at once)."""
    message = _failure(body, patch, exc)
    status_code = 503 if isinstance(exc, kube.NotOwnedError) else exc.status or 0
    delay = apply_retry_delay(status_code, retry)
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


_pauses: dict[str, pause.Pause] = {}  # each group's pause as this process last saw it


@kopf.on.event(GROUP, VERSION, PLURAL)
def pause_changed(type: str, body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    """A pause annotation added, changed or removed: apply the group's objects as they should
    be now (the Deployment held or not; everything, once reconciliation resumes). The first
    sight of a group is the create or resume handler's."""
    _pause_changed(type, body, patch)


def _pause_changed(type: str, body: kopf.Body, patch: kopf.Patch) -> None:
    uid = body.metadata["uid"]
    if type == "DELETED":
        _pauses.pop(uid, None)
        _reconciled.discard(uid)
        pause.UNAPPLIED.pop(uid, None)
        owned.forget(body.metadata["namespace"], body.metadata["name"])
        return
    held, before = pause.read(body.metadata), _pauses.get(uid)
    if before is None or before == held:
        _pauses[uid] = held
        return
    log.info("%s: pause %s -> %s", body.metadata["name"], before, held)
    if held.reconciliation:
        _pauses[uid] = held
        return
    try:
        parsed = parse_spec(dict(body.spec))
    except ConfigError:
        _pauses[uid] = held
        return  # the pass reports the spec
    # Unpaused with autoscaling on: resume from the held count, as KEDA does, not from a
    # spec.replicas that may be hours old; autoscaling moves it from there.
    policy = parsed.fleet.autoscaling
    resume = before.replicas if held.replicas is None and not held.reconciliation else None
    try:
        if resume is not None and policy is not None and not policy.external:
            _scale_to(body, resume)
            held = dataclasses.replace(held, replicas=resume)
        deployment = _apply_all(body, parsed, held)
    except (kube.NotOwnedError, k8s.ApiException, urllib3.exceptions.HTTPError) as exc:
        # Not recorded as seen: the group's next event, or its next pass (a group at rest has
        # no event: ``pause.UNAPPLIED``), tries again, so a pause change is never lost to an
        # API server's blip.
        if isinstance(exc, urllib3.exceptions.HTTPError):
            log.warning("%s: applying the pause change failed: %s", body.metadata["name"], exc)
        else:
            _failure(body, patch, exc)
        pause.UNAPPLIED[uid] = _apply_pause
        return
    _pauses[uid] = pause.read(body.metadata)
    pause.UNAPPLIED.pop(uid, None)
    _applied(body, patch, deployment)


def _apply_pause(body: kopf.Body, patch: kopf.Patch) -> None:
    """A pause change that failed, applied again by the periodic pass."""
    _pause_changed("MODIFIED", body, patch)


def _scale_to(body: kopf.Body, replicas: int) -> None:
    """``spec.replicas`` through the scale subresource, as the autoscaler writes it."""
    meta = body.metadata
    k8s.CustomObjectsApi(kube.client()).patch_namespaced_custom_object_scale(
        GROUP, VERSION, meta["namespace"], PLURAL, meta["name"], {"spec": {"replicas": replicas}}
    )


@kopf.on.event(*OWNED[0], labels=MANAGED)
@kopf.on.event(*OWNED[1], labels=MANAGED)
@kopf.on.event(*OWNED[2], labels=MANAGED)
def put_back(type: str, body: kopf.Body, **kwargs: Any) -> None:
    """An owned object deleted, or changed by anyone but this process: put back from its group
    (the initial listing is left to the resume handler, which applies every group)."""
    if type is None or (type != "DELETED" and kube.written(body)):  # None: the listing
        return
    groups: kopf.Index[tuple[str, str], dict[str, Any]] = kwargs["groups"]  # the index
    ref = kube.controller(body.metadata.get("ownerReferences"))
    if ref is None or ref.get("kind") != "ConsumerGroup":
        return
    for group in groups.get((body.metadata["namespace"], ref["name"]), []):
        if group["metadata"]["uid"] == ref["uid"]:
            deleted = type == "DELETED"
            why = "deleted" if deleted else "changed"
            version = None if deleted else body.metadata.get("resourceVersion")
            owned.put_back(body["kind"], group, deleted, why, version, kube.rival(body))
