"""Keeping what a ConsumerGroup owns as its spec says, between reconciles.

Owns: putting back one owned object (the Deployment, the ConfigMap or the Service) that was
deleted or edited by hand, from the group as last seen: ``handlers.py`` calls it on a watch
event of an object labelled ``app.kubernetes.io/managed-by=kafleet-operator`` that this
process did not write itself (``kube.written``), and the periodic pass when it finds the
Deployment gone. The Deployment gets the group's ``spec.replicas`` (the one source), or the
held count while ``kafleet.io/paused-replicas`` is set; nothing is put back while
``kafleet.io/pause-reconciliation`` is true. Before re-creating a deleted object the group is
read afresh: one being deleted (its objects go with it) gets nothing back.

Does not own the objects' shape (``builders.py``), the ConfigMap's writing (``tuner.py``), the
reconcile (``handlers.py``) or the ownership check (``kube.apply``).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from typing import Any, cast

import kopf
from kubernetes import client as k8s

from kafleet.errors import ConfigError
from kafleet_operator import builders, pause, tuner
from kafleet_operator.crd import GROUP, PLURAL, VERSION
from kafleet_operator.kube import NotOwnedError, api_message, apply, client, post_event
from kafleet_operator.spec import parse_spec

log = logging.getLogger("kafleet.operator")
KINDS = ("Deployment", "ConfigMap", "Service")


def drift(deployment: Any, parsed: Any, held: pause.Pause) -> str | None:
    """How the live Deployment (a client model) differs from what the spec and the pause say,
    in what the operator decides (replicas, configuration, image); None when it does not. The
    pass puts back a drift that outlives a pass: a watch event lost, or a put-back that
    failed (kopf never retries an event handler)."""
    spec = deployment.spec
    if spec is None:
        return None
    wanted = held.deployment_replicas(parsed.fleet.replicas)
    if spec.replicas != wanted:
        return f"replicas {spec.replicas}, not {wanted}"
    template = spec.template
    annotations = (template.metadata.annotations if template.metadata else None) or {}
    if annotations.get(builders.CONFIG_HASH) != builders.config_hash(parsed):
        return "its configuration hash is not the spec's"
    images = {c.name: c.image for c in (template.spec.containers if template.spec else [])}
    if images.get("worker") != parsed.fleet.image:
        return f"worker image {images.get('worker')}, not {parsed.fleet.image}"
    return None


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


def put_back(kind: str, group: Mapping[str, Any], deleted: bool, why: str) -> bool:
    """Apply the group's ``kind`` object again; whether it was applied. ``why`` says what
    happened to it (for the log and the Event)."""
    meta = group["metadata"]
    namespace, name = meta["namespace"], meta["name"]
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
    try:
        if kind == "Deployment":
            replicas = held.deployment_replicas(parsed.fleet.replicas)
            apply(builders.deployment(owner, parsed, replicas))
        elif kind == "ConfigMap":
            tuner.apply_config_map(body, parsed)
        elif kind == "Service":
            apply(builders.service(owner))
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
    message = f"{kind} {why}: put back as the spec says"
    log.info("%s/%s: %s", namespace, name, message)
    post_event(group, "PutBack", message)
    return True
