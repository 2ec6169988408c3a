"""Keeping what a ConsumerGroup owns as its spec says, between reconciles.

Owns: putting back one owned object (the Deployment, the ConfigMap or the Service) that was
deleted or edited by hand, from the group as last seen: on a watch event of an object labelled
``app.kubernetes.io/managed-by=kafleet-operator`` that this process did not write itself
(``on_event``, which the kopf handler calls; ``kube.written``), and from the periodic pass when
it finds the Deployment gone. The Deployment gets the group's ``spec.replicas`` (the one
source), or the held count while ``kafleet.io/paused-replicas`` is set; nothing is put back
while ``kafleet.io/pause-reconciliation`` is true. Before re-creating a deleted object the
group is read afresh: one being deleted (its objects go with it) gets nothing back. Applying
the metrics Service (``apply_service``, the reconcile's too): headless, and one an older
operator made with a cluster IP is made again.

Does not own the objects' shape (``builders.py``), the ConfigMap's writing (``tuner.py``), the
reconcile (``applying.py``) or the ownership check (``kube.apply``).
"""

from __future__ import annotations

import copy
import logging
import time
from collections import deque
from collections.abc import Mapping
from typing import Any, cast

import kopf
from kubernetes import client as k8s

from kafleet.errors import ConfigError
from kafleet_operator.policy import builders, pause
from kafleet_operator.policy.crd import GROUP, PLURAL, VERSION
from kafleet_operator.policy.spec import parse_spec
from kafleet_operator.reconcile import kube, leadership, tuner
from kafleet_operator.reconcile.kube import NotOwnedError, api_message, apply, client, post_event

log = logging.getLogger("kafleet.operator")
KINDS = ("Deployment", "ConfigMap", "Service")
# Another writer that keeps changing an object (an HPA on the Deployment, a mutating policy)
# would have it put back at every event, each a rollout or a rescale: after this many
# put-backs of one object within the window, it is left alone until the window has passed.
FIGHT_LIMIT, FIGHT_WINDOW_S = 5, 300.0
_put_backs: dict[tuple[str, str, str], deque[float]] = {}


def forget(namespace: str, name: str) -> None:
    """A group gone: its objects' put-backs, and what was written of them, are forgotten."""
    names = {name, f"{name}-worker", f"{name}-metrics"}
    for key in [k for k in _put_backs if k[1] == namespace and k[2] in names]:
        _put_backs.pop(key, None)
    kube.forget(namespace, names)
    tuner.forget(namespace, name)


def fighting(kind: str, namespace: str, name: str, now: float) -> bool:
    """Whether ``kind`` ``namespace/name`` was put back ``FIGHT_LIMIT`` times within
    ``FIGHT_WINDOW_S``; records this put-back when it was not."""
    times = _put_backs.setdefault((kind, namespace, name), deque())
    while times and now - times[0] > FIGHT_WINDOW_S:
        times.popleft()
    if len(times) >= FIGHT_LIMIT:
        return True
    times.append(now)
    return False


def drift(
    deployment: Mapping[str, Any], parsed: Any, held: pause.Pause, config_hash: str = ""
) -> str | None:
    """How the live Deployment (as ``watched.py`` holds it) differs from what the spec and the
    pause say, in what the operator decides (replicas, configuration, image); None when it
    does not. The pass puts back a drift that outlives a pass: a watch event lost, or a
    put-back that failed (kopf never retries an event handler). ``config_hash``: the spec's,
    if the caller has it already."""
    spec = deployment.get("spec")
    if not spec or parsed is None or held.reconciliation:
        return None
    wanted = held.deployment_replicas(parsed.fleet.replicas)
    if spec.get("replicas") != wanted:
        return f"replicas {spec.get('replicas')}, not {wanted}"
    template = spec.get("template") or {}
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    if annotations.get(builders.CONFIG_HASH) != (config_hash or builders.config_hash(parsed)):
        return "its configuration hash is not the spec's"
    containers = (template.get("spec") or {}).get("containers") or []
    images = {c.get("name"): c.get("image") for c in containers}
    if images.get("worker") != parsed.fleet.image:
        return f"worker image {images.get('worker')}, not {parsed.fleet.image}"
    return None


def latest(group: Mapping[str, Any]) -> dict[str, Any] | None:
    """The group as the API server holds it now; None if gone, replaced or being deleted."""
    meta = group["metadata"]
    return _fresh(meta["namespace"], meta["name"], meta["uid"])


def _fresh(namespace: str, name: str, uid: str) -> dict[str, Any] | None:
    """The group as the API server holds it now; None if gone, replaced or being deleted."""
    try:
        raw = cast(
            dict[str, Any],
            k8s.CustomObjectsApi(client()).get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name
            ),
        )
    except k8s.ApiException as exc:
        if exc.status == 404:
            return None
        raise
    meta = raw.get("metadata", {})
    if meta.get("uid") != uid or meta.get("deletionTimestamp"):
        return None
    return raw


def on_event(type: str | None, body: Mapping[str, Any], groups: Mapping[Any, Any]) -> None:
    """A watch event of an owned object: put it back from its group (in ``groups``, the bodies
    of every watched group by namespace and name) if it was deleted, or changed by anyone but
    this process. The initial listing (``type`` None) is left to the reconcile of each group."""
    meta = body["metadata"]
    if type is None or (type != "DELETED" and kube.written(body)):
        return
    ref = kube.controller(meta.get("ownerReferences"))
    if ref is None or ref.get("kind") != "ConsumerGroup":
        return
    if not leadership.owns(meta["namespace"], ref["name"]):
        return  # another operator pod leads the group's shard
    for group in groups.get((meta["namespace"], ref["name"]), []):
        if group["metadata"]["uid"] == ref["uid"]:
            deleted = type == "DELETED"
            why = "deleted" if deleted else "changed"
            version = None if deleted else meta.get("resourceVersion")
            put_back(body["kind"], group, deleted, why, version, kube.rival(body))


def put_back(
    kind: str,
    group: Mapping[str, Any],
    deleted: bool,
    why: str,
    seen_version: str | None = None,
    rival: str = "",
) -> bool:
    """Apply the group's ``kind`` object again; whether it was applied. ``why`` says what
    happened to it (for the log and the Event); ``seen_version``: the object's
    resourceVersion as the event showed it (no Event when the apply changed nothing, as after
    ``kubectl rollout restart``); ``rival``: who else wrote it."""
    meta = group["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    if not deleted and fighting(kind, namespace, name, time.monotonic()):
        log.warning(
            "%s/%s: the %s was changed back %d times in %.0f s%s: left as it is for now",
            namespace, name, kind, FIGHT_LIMIT, FIGHT_WINDOW_S,
            f" (by {rival})" if rival else "",
        )  # fmt: skip
        return False
    if deleted:
        fresh = _fresh(namespace, name, meta["uid"])
        if fresh is None:
            return False
        group = fresh
    body = kopf.Body(cast(kopf.RawBody, copy.deepcopy(dict(group))))
    held = pause.read(body.metadata)
    if held.reconciliation:
        return False
    try:
        parsed = parse_spec(dict(body.spec))
    except ConfigError:
        return False  # the pass reports the spec; there is nothing right to put back
    owner = {"apiVersion": body["apiVersion"], "kind": body["kind"], "metadata": dict(meta)}
    version: str | None = None
    try:
        if kind == "Deployment":
            replicas = held.deployment_replicas(parsed.fleet.replicas)
            version = _version(apply(builders.deployment(owner, parsed, replicas)))
        elif kind == "ConfigMap":
            tuner.apply_config_map(body, parsed)
        elif kind == "Service":
            version = _version(apply_service(owner))
        else:
            raise ValueError(f"a ConsumerGroup owns no {kind}")
    except NotOwnedError as exc:
        log.warning("%s/%s: %s", namespace, name, exc)
        return False
    except k8s.ApiException as exc:
        log.warning(
            "%s/%s: putting back the %s failed: %s", namespace, name, kind, api_message(exc)
        )
        return False
    if seen_version is not None and version == seen_version:
        log.debug("%s/%s: the %s was already as the spec says", namespace, name, kind)
        return True
    message = f"{kind} {why}{f' by {rival}' if rival else ''}: put back as the spec says"
    log.info("%s/%s: %s", namespace, name, message)
    post_event(group, "PutBack", message)
    return True


def apply_service(owner: dict[str, Any]) -> dict[str, Any]:
    """The metrics Service, headless; one an older operator made with a cluster IP (which
    cannot be taken away) is deleted and made again. The Service as applied."""
    service = builders.service(owner)
    try:
        return apply(service)
    except k8s.ApiException as exc:
        if exc.status != 422 or "clusterIP" not in api_message(exc):
            raise
    meta = service["metadata"]
    log.info("%s: the Service %s becomes headless", owner["metadata"]["name"], meta["name"])
    with leadership.writing(meta["namespace"], owner["metadata"]["name"]):
        k8s.CoreV1Api(client()).delete_namespaced_service(meta["name"], meta["namespace"])
    return apply(service)


def _version(applied: Mapping[str, Any]) -> str | None:
    version = (applied.get("metadata") or {}).get("resourceVersion")
    return None if version is None else str(version)
