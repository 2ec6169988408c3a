"""What the operator's watches hold of the objects it owns: read by the passes, never fetched.

Owns: three kopf indexes (coroutines: they do no I/O, so kopf runs them in its event loop,
never queued behind the reconciles on its threads), fed by the watches the operator keeps
anyway (every Deployment, ConfigMap and pod labelled managed-by kafleet-operator, filtered by
the API server): each
group's Deployment, its worker ConfigMap, and its pods that count (Ready, with an address,
not terminating), each trimmed to what a pass reads, so a thousand groups cost no API call
per pass and little memory; and the lookups by group (``deployment``, ``config_map``,
``pods``), bound once at startup (``bind``). An index is as fresh as its watch: a pass that
is about to write from what it read (the tuner) reads the object itself first.

Does not own putting objects back (``owned.py``) or what a pass does with them.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import kopf

from kafleet_operator.policy import builders

Key = tuple[str, str]  # (namespace, group name)
MANAGED = {"app.kubernetes.io/managed-by": builders.labels("")["app.kubernetes.io/managed-by"]}
INSTANCE = "app.kubernetes.io/instance"
_indexes: dict[str, Mapping[Key, Any]] = {}


def _group(meta: Mapping[str, Any]) -> str | None:
    return (meta.get("labels") or {}).get(INSTANCE)


@kopf.index("apps", "v1", "deployments", labels=MANAGED)
async def deployments(body: kopf.Body, **_: Any) -> dict[Key, dict[str, Any]]:
    """A group's Deployment: its metadata (owners, generation), spec and status; the
    template's containers keep only their names and images."""
    meta, spec = body.metadata, dict(body.spec)
    template = copy.deepcopy(spec.get("template") or {})
    pod = template.get("spec") or {}
    pod["containers"] = [
        {"name": c.get("name"), "image": c.get("image")} for c in pod.get("containers") or []
    ]
    template["spec"] = {"containers": pod["containers"]}
    trimmed = {
        "metadata": {
            "name": meta.get("name"),
            "generation": meta.get("generation"),
            "ownerReferences": copy.deepcopy(meta.get("ownerReferences") or []),
        },
        "spec": {"replicas": spec.get("replicas"), "template": template},
        "status": copy.deepcopy(dict(body.status)),
    }
    return {(meta["namespace"], meta["name"]): trimmed}


@kopf.index("v1", "configmaps", labels=MANAGED)
async def config_maps(body: kopf.Body, **_: Any) -> dict[Key, dict[str, Any]]:
    meta = body.metadata
    kept = {
        "metadata": {"name": meta.get("name"), "annotations": dict(meta.get("annotations") or {})},
        "data": dict(body.get("data") or {}),
    }
    return {(meta["namespace"], meta["name"]): kept}


@kopf.index("v1", "pods", labels=MANAGED)
async def pods(body: kopf.Body, **_: Any) -> dict[Key, tuple[str, str]]:
    """A group's pod that counts: (its address, its name); none for one that does not (an
    empty result takes the pod out of the index: kopf keeps the last entry for ``None``)."""
    meta, status = body.metadata, body.status
    group = _group(meta)
    if group is None or meta.get("deletionTimestamp"):
        return {}
    conditions = status.get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    if not ready or not status.get("podIP"):
        return {}
    return {(meta["namespace"], group): (str(status["podIP"]), str(meta["name"]))}


def bind(**indexes: Mapping[Key, Any]) -> None:
    """Keep the indexes kopf passes to a startup handler, for the passes to read."""
    _indexes.update(indexes)


def _one(index: str, key: Key) -> dict[str, Any] | None:
    found = _indexes.get(index, {}).get(key)
    for value in found or ():
        return dict(value)
    return None


def deployment(namespace: str, name: str) -> dict[str, Any] | None:
    return _one("deployments", (namespace, name))


def config_map(namespace: str, name: str) -> dict[str, Any] | None:
    """The group's worker ConfigMap, named ``<group>-worker``."""
    return _one("config_maps", (namespace, f"{name}-worker"))


def ready_pods(namespace: str, name: str) -> list[tuple[str, str]]:
    """The (address, name) of every pod of the group that counts."""
    return sorted(_indexes.get("pods", {}).get((namespace, name)) or ())
