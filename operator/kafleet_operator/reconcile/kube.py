"""The operator's edge to the Kubernetes API: one client, and the few writes it makes.

Owns: the one API client (in-cluster, else the kubeconfig), server-side apply with the
operator's field manager, merge-patching a ConsumerGroup's ``status`` subresource, posting
Events about a ConsumerGroup (in the background, in order), and reading the API server's own
message out of a failed call (what a condition should carry, not an HTTP dump).

An object built with a controller owner reference is applied only if it is new or already
that owner's (``NotOwnedError`` otherwise): a ConfigMap, Service or Deployment of the same name
made by someone else is never taken over with a forced apply, nor collected with the group
later. Each apply remembers what it wrote (``written``), so a watch of the owned objects
tells the operator's own writes from someone else's edits.

Does not own what is applied (``builders.py``) or decided (``applying.py``, ``observer.py``).
"""

from __future__ import annotations

import concurrent.futures
import datetime
import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError

from kafleet_operator.policy.crd import GROUP, PLURAL, VERSION
from kafleet_operator.reconcile import leadership

log = logging.getLogger("kafleet.operator")
FIELD_MANAGER = "kafleet-operator"
_api: DynamicClient | None = None
_client: k8s.ApiClient | None = None
_poster = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kafleet-events")
# (kind, namespace, name) -> the version of the object this process last wrote: its
# generation where it has one (a Deployment: its status moves without it), else its
# resourceVersion.
_written: dict[tuple[str, str, str], str] = {}


def forget(namespace: str, names: Iterable[str]) -> None:
    """A group gone: what was written of its objects (``names``) is no longer remembered."""
    for key in [k for k in _written if k[1] == namespace and k[2] in set(names)]:
        _written.pop(key, None)


class NotOwnedError(Exception):
    """An object of the name exists and its controller is not the would-be owner."""

    def __init__(self, kind: str, name: str, owner: str, holder: str | None) -> None:
        self.kind, self.name = kind, name
        held = f"controlled by {holder}" if holder else "with no controller"
        super().__init__(
            f"{kind} {name} exists, {held}, not by ConsumerGroup {owner}: the operator leaves "
            f"it alone (delete or rename that {kind}, or name the group otherwise)"
        )


def controller(references: Iterable[Any] | None) -> Mapping[str, Any] | None:
    """The controller owner reference among ``references`` (dicts or client models)."""
    for ref in references or []:
        if not isinstance(ref, Mapping):
            ref = client().sanitize_for_serialization(ref)  # type: ignore[no-untyped-call]
        if ref.get("controller"):
            return dict(ref)
    return None


def _version(metadata: Mapping[str, Any]) -> str:
    return str(metadata.get("generation") or metadata.get("resourceVersion") or "")


def rival(obj: Mapping[str, Any]) -> str:
    """The other field managers of the latest write of ``obj`` (``status`` aside), as a
    comma-separated list; empty when it was this operator's."""
    writes = [
        m for m in obj["metadata"].get("managedFields") or [] if m.get("subresource") != "status"
    ]
    times = sorted({str(m.get("time")) for m in writes})
    latest = {str(m.get("manager")) for m in writes if times and str(m.get("time")) == times[-1]}
    return ", ".join(sorted(latest - {FIELD_MANAGER}))


def written(obj: Mapping[str, Any]) -> bool:
    """Whether ``obj`` (a watched object) is as this process last wrote it, or its latest
    write (``status`` aside) was this field manager's: the watch event of an apply may
    arrive before the apply's answer."""
    meta = obj["metadata"]
    key = (str(obj.get("kind")), str(meta.get("namespace")), str(meta.get("name")))
    if key in _written and _written[key] == _version(meta):
        return True
    writes = [m for m in meta.get("managedFields") or [] if m.get("subresource") != "status"]
    times = sorted({str(m.get("time")) for m in writes})
    latest = {m.get("manager") for m in writes if times and str(m.get("time")) == times[-1]}
    return latest == {FIELD_MANAGER}


# Every call the operator makes gives up after this (connect, read) in seconds: the client's
# own default is no timeout, so a half-open connection would hang a thread of kopf's pool for
# ever, and with it the group's tuning lock.
REQUEST_TIMEOUT_S = (5.0, 30.0)


class TimedApiClient(k8s.ApiClient):
    """``ApiClient`` whose calls time out (``REQUEST_TIMEOUT_S``) unless one is given: every
    typed and dynamic call goes through ``call_api``."""

    def call_api(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("_request_timeout") is None:
            kwargs["_request_timeout"] = REQUEST_TIMEOUT_S
        return super().call_api(*args, **kwargs)


def _configuration() -> k8s.Configuration:
    configuration = k8s.Configuration()
    try:
        k8s_config.load_incluster_config(configuration)  # type: ignore[no-untyped-call]
    except k8s_config.ConfigException:
        k8s_config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    return configuration


def client() -> k8s.ApiClient:
    """The operator's one API client: in-cluster, else the kubeconfig. Every call goes through
    it, not through whatever configuration kopf's login left in the library's globals."""
    global _client
    if _client is None:
        _client = TimedApiClient(_configuration())
    return _client


def watch_client() -> k8s.ApiClient:
    """A client for the watches of the owned objects (``reading/watched.py``), apart from the
    calls' one: each watch holds a connection for a minute at a time, and sets its own
    timeouts."""
    return k8s.ApiClient(_configuration())


def api() -> DynamicClient:
    global _api
    if _api is None:
        _api = DynamicClient(client())  # type: ignore[no-untyped-call]
    return _api


def apply(obj: dict[str, Any]) -> dict[str, Any]:
    """Server-side apply; a refusal raises ``ApiException`` (``api_message`` reads it), an
    existing object of the name that the built one's controller does not control raises
    ``NotOwned`` (and is not touched)."""
    meta = obj["metadata"]
    owner = controller(meta.get("ownerReferences"))
    group = owner["name"] if owner is not None else meta["name"]
    with leadership.writing(meta["namespace"], group):
        return _apply(obj, owner)


def _apply(obj: dict[str, Any], owner: Mapping[str, Any] | None) -> dict[str, Any]:
    resource = api().resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    meta = obj["metadata"]
    if owner is not None:
        try:
            live = resource.get(name=meta["name"], namespace=meta["namespace"]).to_dict()
        except NotFoundError:
            live = None
        holder = controller((live or {}).get("metadata", {}).get("ownerReferences"))
        if live is not None and (holder or {}).get("uid") != owner["uid"]:
            who = f"{holder['kind']} {holder['name']}" if holder else None
            raise NotOwnedError(obj["kind"], meta["name"], owner["name"], who)
    result = dict(
        resource.server_side_apply(
            body=obj,
            name=meta["name"],
            namespace=meta["namespace"],
            field_manager=FIELD_MANAGER,
            force_conflicts=True,
        ).to_dict()
    )
    key = (obj["kind"], meta["namespace"], meta["name"])
    _written[key] = _version(result.get("metadata") or {})
    return result


def api_message(exc: k8s.ApiException) -> str:
    """What the API server said (its Status ``message``), else the HTTP status and reason."""
    try:
        status = json.loads(exc.body or "")
    except (TypeError, ValueError):
        status = None
    if isinstance(status, dict) and status.get("message"):
        return str(status["message"])
    return f"{exc.status} {exc.reason}".strip()


def patch_status(body: Mapping[str, Any], status: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON merge patch of the ConsumerGroup's status (``None`` values remove fields); the
    group as the API server holds it after."""
    meta = body["metadata"]
    with leadership.writing(meta["namespace"], meta["name"]):
        written = k8s.CustomObjectsApi(client()).patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            meta["namespace"],
            PLURAL,
            meta["name"],
            # The uid: a pass holding a group deleted and made again under its name writes
            # nothing on the new one (the API server refuses a uid that is not the object's).
            {"metadata": {"uid": meta.get("uid")}, "status": dict(status)},
            _content_type="application/merge-patch+json",
        )
    return dict(written) if isinstance(written, Mapping) else {}


def scale(body: Mapping[str, Any], replicas: int, expected: int | None = None) -> bool:
    """``spec.replicas`` of the ConsumerGroup through its scale subresource (as ``kubectl
    scale`` and an HPA write it). With ``expected`` (the count a decision started from): only
    if the group, read again, still has that count, and unchanged since that read (its
    resourceVersion as a precondition): a decision made from a copy behind the server's (a
    pod that came to lead a group scaled while it stood by) is not written. False then."""
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    patch: dict[str, Any] = {"spec": {"replicas": replicas}}
    api = k8s.CustomObjectsApi(client())
    if expected is not None:
        now: Any = api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        if now["spec"].get("replicas") != expected:
            return False
        patch["metadata"] = {"resourceVersion": now["metadata"]["resourceVersion"]}
    with leadership.writing(namespace, name):
        try:
            api.patch_namespaced_custom_object_scale(GROUP, VERSION, namespace, PLURAL, name, patch)
        except k8s.ApiException as exc:
            if exc.status == 409 and expected is not None:  # changed since the read
                return False
            raise
    return True


def post_event(body: Mapping[str, Any], reason: str, message: str) -> None:
    """A Normal Event on the ConsumerGroup, posted in the background as kopf posts its own: a
    slow API server never holds up a pass (its status is written first). A failure is logged."""
    meta = body["metadata"]
    now = datetime.datetime.now(datetime.UTC)
    event = k8s.CoreV1Event(
        metadata=k8s.V1ObjectMeta(generate_name=f"{meta['name']}.", namespace=meta["namespace"]),
        involved_object=k8s.V1ObjectReference(
            api_version=body.get("apiVersion", f"{GROUP}/{VERSION}"),
            kind=body.get("kind", "ConsumerGroup"),
            name=meta["name"],
            namespace=meta["namespace"],
            uid=meta.get("uid"),
        ),
        reason=reason,
        message=message[:1024],
        type="Normal",
        source=k8s.V1EventSource(component=FIELD_MANAGER),
        first_timestamp=now,
        last_timestamp=now,
        count=1,
    )
    _poster.submit(_post, meta["namespace"], event)


def _post(namespace: str, event: k8s.CoreV1Event) -> None:
    try:
        k8s.CoreV1Api(client()).create_namespaced_event(namespace, event)
    except (k8s.ApiException, urllib3.exceptions.HTTPError, OSError) as exc:  # a courtesy
        log.warning("event %s in %s not posted: %s", event.reason, namespace, exc)
