"""Applying a ConsumerGroup's objects: the reconcile of a created, updated or resumed group, and
of a pause that changed.

Owns: parsing the spec, server-side applying the ConfigMap (through the tuner, its one writer),
the Deployment and the Service the builders make, and writing what was applied in the status
(``appliedGeneration``, ``readyReplicas``, the label selector). An apply the API server refuses
is recorded in ``status.applyFailure`` with its message, then retried with backoff if the
server failed or the name is someone else's, or left for an edit if it judged the objects wrong
(``policy/apply_retry.py``). Server-side apply with one field manager makes every reconcile
idempotent: applying what is already there changes nothing, so a restarted operator leaves a
right fleet alone.

Pauses: kopf never runs the update handler for the pause annotations (it leaves every
annotation under its storage prefix, ``kafleet.io/``, out of the diff), so ``pause_changed``
sees every event of a group and applies its objects when what the annotations pause differs
from what this process last saw, in either direction. Unpaused with autoscaling on, the group
resumes from the held count, as KEDA does. A pause change that fails is applied again by the
periodic pass (``pause.UNAPPLIED``).

Shards: a group whose shard another operator pod leads is left alone here (its pause is only
noted, so this pod knows it if it comes to lead); one whose shard this pod comes to lead later is
adopted by the periodic pass (``adopt``), since kopf handed it over while another pod led it.

Does not own the objects' shape (``builders.py``), when a reconcile runs (the kopf handlers,
``handlers.py``), or the periodic pass (``observer.py``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any, NoReturn, cast

import kopf
import urllib3
from kubernetes import client as k8s

from kafleet.errors import ConfigError
from kafleet_operator.policy import builders, pause
from kafleet_operator.policy.apply_retry import apply_retry_delay
from kafleet_operator.policy.spec import ParsedSpec, parse_spec
from kafleet_operator.reconcile import kube, leadership, metrics, observer, owned, tuner
from kafleet_operator.reconcile.kube import api_message, apply

log = logging.getLogger("kafleet.operator")

# The groups kopf has handed to this process (created, updated or resumed), led or not: the
# periodic pass observes those, and before kopf resumes them, those whose status says their
# generation is applied (``applied``); the others wait for kopf's create, update or resume.
listed: set[str] = set()
# Of those, the groups this process has reconciled while leading their shard (``adopt`` does it
# for one whose shard it came to lead after kopf had handed it over).
reconciled: set[str] = set()
_pauses: dict[str, pause.Pause] = {}  # each group's pause as this process last saw it
# Groups whose reconcile this pod's fence stopped (a Lease lost, or renewed late: ``fenced``):
# the pass reconciles them on adopting, whatever their status says.
_fenced: set[str] = set()


def reconcile(body: kopf.Body, status: kopf.Status, patch: kopf.Patch, retry: int) -> None:
    """Apply the group's objects as its spec says (unless reconciliation is paused, or another
    operator pod leads the group's shard: then nothing, and nothing is written)."""
    namespace, name = body.metadata["namespace"], body.metadata["name"]
    uid = body.metadata["uid"]
    listed.add(uid)
    if not leadership.owns(namespace, name):
        if leadership.holds(namespace, name):
            fenced(uid)  # a renewal late: this pod's shard still, and no hand-over will come
        else:
            reconciled.discard(uid)
        return
    reconciled.add(uid)
    try:
        _reconcile_led(body, status, patch, retry)
    except leadership.NotLeaderError:
        fenced(uid)
        raise


def _reconcile_led(body: kopf.Body, status: kopf.Status, patch: kopf.Patch, retry: int) -> None:
    namespace, name = body.metadata["namespace"], body.metadata["name"]
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


def fenced(uid: str) -> None:
    """This pod's fence stopped a reconcile of the group (before or part-way through its
    writes): reconciled by the pass once this pod owns the group again, whatever its status
    says (``adopt``). A renewal late past its deadline (a slow API server) keeps the shard, so
    no hand-over comes to do it: B9, 10,000 groups on 2 shards, 4 groups never applied."""
    reconciled.discard(uid)
    _fenced.add(uid)


def let_go(body: Mapping[str, Any]) -> None:
    """The group's shard is no longer this pod's: what this pod meant to do for it is dropped
    (its leader does it), and its pause noted as it is now, so that a pause retry or change of
    this pod's never runs on a count the other leader has moved since."""
    meta = body.get("metadata") or {}
    uid = str(meta.get("uid"))
    if uid in reconciled or uid in _fenced or uid in pause.UNAPPLIED:  # else nothing to drop
        reconciled.discard(uid)
        _fenced.discard(uid)
        pause.UNAPPLIED.pop(uid, None)
        _pauses[uid] = pause.read(meta)


def adopt(raw: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A group whose shard this pod came to lead after kopf had handed the group over (no
    kopf event will come for it): reconciled as a resume would, unless its status says its
    generation was applied without a failure; then nothing is written (the pass puts back any
    drift of its Deployment, as after a restart). A copy that says it was not is read again
    (one GET) and judged as the API server holds it: this pod's copy may be behind (a
    standby's copy of a group scaled while it stood by: applied as it was, it scaled the group
    down to that old count). A refusal is recorded in the status; a server's or a name's
    (which kopf would retry) is tried again at the next pass. The group to pass on with, as
    judged (None: gone, or being deleted)."""
    uid = str((raw.get("metadata") or {}).get("uid"))
    body = raw
    if uid in _fenced or not applied(raw):
        fresh = owned.latest(raw)
        if fresh is None:
            return None
        body = fresh
    group = kopf.Body(cast(kopf.RawBody, body))
    meta, status = group.metadata, group.status
    if applied(body) and uid not in _fenced:
        reconciled.add(uid)
        return body
    log.info("%s/%s: reconciled on taking its shard", meta["namespace"], meta["name"])
    patch = kopf.Patch()
    try:
        reconcile(group, status, patch, retry=0)
    except kopf.TemporaryError:
        reconciled.discard(uid)
    except kopf.PermanentError:
        pass  # recorded; an edit runs the reconcile again
    if patch.get("status"):
        try:
            kube.patch_status(group, patch["status"])
        except leadership.NotLeaderError:
            fenced(uid)  # applied, but its status does not say so yet
            raise
    if uid in reconciled:
        _fenced.discard(uid)
    return body


def applied(body: Mapping[str, Any]) -> bool:
    """Whether the group's status says its generation was applied, with no failure since."""
    status = body.get("status") or {}
    generation = (body.get("metadata") or {}).get("generation")
    return status.get("appliedGeneration") == generation and not status.get("applyFailure")


def _owner(body: kopf.Body) -> dict[str, Any]:
    return {"apiVersion": body["apiVersion"], "kind": body["kind"], "metadata": dict(body.metadata)}


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
    """Record the refusal (``_failure``); then have kopf retry after the policy's delay, or
    wait for an edit (an edit runs the reconcile again at once)."""
    message = _failure(body, patch, exc)
    status_code = 503 if isinstance(exc, kube.NotOwnedError) else exc.status or 0
    delay = apply_retry_delay(status_code, retry)
    if delay is None:
        raise kopf.PermanentError(f"refused by the API server: {message}") from exc
    raise kopf.TemporaryError(message, delay=delay) from exc


def pause_changed(type: str, body: kopf.Body, patch: kopf.Patch) -> None:
    """A group's event: apply its objects if what its annotations pause changed (or forget it
    when it is gone)."""
    uid = body.metadata["uid"]
    if type == "DELETED":
        _pauses.pop(uid, None)
        reconciled.discard(uid)
        _fenced.discard(uid)
        listed.discard(uid)
        pause.UNAPPLIED.pop(uid, None)
        owned.forget(body.metadata["namespace"], body.metadata["name"])
        return
    held, before = pause.read(body.metadata), _pauses.get(uid)
    # A shard held with its renewal late goes on to the fence below, which leaves the change
    # to the pass (``pause.UNAPPLIED``); noted as seen here, it was never applied.
    if before is None or before == held or not leadership.holds_body(body):
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
            kube.scale(body, resume)
            held = dataclasses.replace(held, replicas=resume)
        deployment = _apply_all(body, parsed, held)
    except leadership.NotLeaderError:
        pause.UNAPPLIED[uid] = _apply_pause  # fenced mid-way: the pass applies it once owned
        raise
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
    pause_changed("MODIFIED", body, patch)
