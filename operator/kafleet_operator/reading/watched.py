"""What the operator's watches hold: the ConsumerGroups, and of the objects it owns what a pass
reads; read by the passes, never fetched.

Owns: every group as kopf last handed it over (``groups``, kept by ``remember``, which a kopf
event handler calls for each event of a group: there from kopf's first sight of the group until
it is deleted); three stores (``informers.py``) fed by watches of the operator's own of the
Deployments, ConfigMaps and pods labelled managed-by kafleet-operator (filtered by the API
server): each group's Deployment, its worker ConfigMap, and its pods that count (Ready, with
an address, not terminating), each trimmed to what a pass reads, so a thousand groups cost no
API call per pass and little memory; the namespaces those watches cover (every namespace at
once when the operator watches the whole cluster, else each namespace from its first group on:
glob patterns and namespaces made later need nothing more, and a Role in each namespace does);
whether a namespace's stores are complete (``ready``: a pass that took a Deployment not yet
listed for one deleted would put it back); and the lookups by group (``deployment``,
``config_map``, ``ready_pods``). An entry is as fresh as its watch: a pass that is about to
write from what it read (the tuner) reads the object itself first.

Not kopf's indexes: kopf holds every handler until its indexes are filled, in time quadratic
in the objects it watches (``informers.py`` says why); with none, kopf hands each group over
as soon as it is listed.

Does not own putting objects back (``owned.py``) or what a pass does with them.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client as k8s

from kafleet_operator.policy import builders
from kafleet_operator.reading import informers

Key = informers.Key  # (namespace, group name), or (namespace, object name)
MANAGED = {"app.kubernetes.io/managed-by": builders.labels("")["app.kubernetes.io/managed-by"]}
SELECTOR = ",".join(f"{k}={v}" for k, v in MANAGED.items())
INSTANCE = "app.kubernetes.io/instance"
ALL: None = None  # the namespace of the watches of the whole cluster
groups: dict[Key, tuple[dict[str, Any], ...]] = {}
_indexes: dict[str, Mapping[Key, Any]] = {}
_informers: dict[str | None, list[informers.Informer]] = {}
_lock = threading.Lock()
_api: k8s.ApiClient | None = None
_clusterwide = False


def _group(meta: Mapping[str, Any]) -> str | None:
    return (meta.get("labels") or {}).get(INSTANCE)


def deployment_kept(body: Mapping[str, Any]) -> dict[Key, dict[str, Any]]:
    """A group's Deployment: its metadata (owners, generation), spec and status; the
    template's containers keep only their names and images."""
    meta, spec = body["metadata"], dict(body.get("spec") or {})
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
        "status": copy.deepcopy(dict(body.get("status") or {})),
    }
    return {(meta["namespace"], meta["name"]): trimmed}


def config_map_kept(body: Mapping[str, Any]) -> dict[Key, dict[str, Any]]:
    meta = body["metadata"]
    kept = {
        "metadata": {"name": meta.get("name"), "annotations": dict(meta.get("annotations") or {})},
        "data": dict(body.get("data") or {}),
    }
    return {(meta["namespace"], meta["name"]): kept}


def pod_kept(body: Mapping[str, Any]) -> dict[Key, tuple[str, str]]:
    """A group's pod that counts: (its address, its name); none for one that does not."""
    meta, status = body["metadata"], body.get("status") or {}
    group = _group(meta)
    if group is None or meta.get("deletionTimestamp"):
        return {}
    conditions = status.get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    if not ready or not status.get("podIP"):
        return {}
    return {(meta["namespace"], group): (str(status["podIP"]), str(meta["name"]))}


def _kinds(api: k8s.ApiClient) -> dict[str, tuple[Callable[..., Any], Callable[..., Any], Any]]:
    """Each store's list calls (of one namespace, of all) and what it keeps of an object."""
    apps, core = k8s.AppsV1Api(api), k8s.CoreV1Api(api)
    return {
        "deployments": (
            apps.list_namespaced_deployment,
            apps.list_deployment_for_all_namespaces,
            deployment_kept,
        ),
        "config_maps": (
            core.list_namespaced_config_map,
            core.list_config_map_for_all_namespaces,
            config_map_kept,
        ),
        "pods": (core.list_namespaced_pod, core.list_pod_for_all_namespaces, pod_kept),
    }


def start(api: k8s.ApiClient, clusterwide: bool) -> None:
    """Watch with ``api`` from now on: the whole cluster at once (``clusterwide``), else each
    namespace once a group there is seen (``remember``)."""
    global _api, _clusterwide
    with _lock:
        _api, _clusterwide = api, clusterwide
        for name in ("deployments", "config_maps", "pods"):
            _indexes[name] = informers.Store()
    if clusterwide:
        follow(ALL)


def follow(namespace: str | None) -> None:
    """Watch ``namespace`` (``ALL``: every one) from now on, if not yet."""
    with _lock:
        where = ALL if _clusterwide else namespace
        if _api is None or where in _informers:
            return
        started: list[informers.Informer] = []
        for name, (one, every, trim) in _kinds(_api).items():
            store = _indexes[name]
            assert isinstance(store, informers.Store)
            lister: Callable[..., Any] = every if where is ALL else _bound(one, where)
            started.append(informers.Informer(name, lister, where, SELECTOR, trim, store).start())
        _informers[where] = started


def _bound(lister: Callable[..., Any], namespace: str) -> Callable[..., Any]:
    def call(**kwargs: Any) -> Any:
        return lister(namespace, **kwargs)

    return call


def ready(namespace: str) -> bool:
    """Whether the watches that cover ``namespace`` have listed it, each at least once."""
    found = _informers.get(ALL if _clusterwide else namespace)
    return bool(found) and all(informer.listed.is_set() for informer in found or ())


def stop() -> None:
    with _lock:
        for started in _informers.values():
            for informer in started:
                informer.stop()
        _informers.clear()


def remember(event: str | None, body: Mapping[str, Any]) -> None:
    """A group's event as kopf hands it over (``None``: listed): kept as last seen, gone when
    deleted; and its namespace watched."""
    meta = body["metadata"]
    key = (str(meta["namespace"]), str(meta["name"]))
    if event == "DELETED":
        if any(kept["metadata"]["uid"] == meta["uid"] for kept in groups.get(key, ())):
            groups.pop(key, None)
        return
    kept = copy.deepcopy(dict(body))
    kept["metadata"].pop("managedFields", None)  # the bulk of an object, and never read
    groups[key] = (kept,)
    follow(key[0])


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
