"""Caches of one kind of object kept by a watch of the operator's own: list, then watch.

Owns: a ``Store`` of what each object contributes under its keys (``(namespace, name)`` or the
like; several objects may contribute to one key, as a group's pods do), read from any thread;
and an ``Informer`` that keeps one kind in one namespace (or all) in a store, as client-go's
informers do: a list (in pages) replaces what the store held of that namespace, a watch from the
list's version follows it (bookmarks keep the version fresh), and a watch that ends is taken up
again from the last version; when the version has expired (410 Gone) or a call failed, a new
list (after a backoff, doubling to 30 s). ``listed`` is set after the first list, and stays set:
a store that is complete but a little stale beats one that is half filled.

Why not kopf's ``@kopf.index``: kopf holds back every handler of every object it watches until
all its indexes are filled, and it waits for that by waking every object's worker at each object
indexed (``aiotoggles.ToggleSet``: one ``asyncio.Condition``, ``notify_all`` at every toggle made
or dropped): time quadratic in the objects watched. A thousand groups (five thousand objects)
waited 29 s before any handler ran, three thousand many minutes (B9).

Does not own what is kept of an object (``watched.py``: the trimming, the kinds, which
namespaces) nor the API client (handed in).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import urllib3
from kubernetes import client as k8s

log = logging.getLogger("kafleet.operator")
Key = tuple[str, str]
Trim = Callable[[Mapping[str, Any]], Mapping[Key, Any]]  # an object -> {key: what is kept}
Lister = Callable[..., Any]  # a list call of the typed client (namespace bound, if any)
PAGE = 500  # objects a page of the list
WATCH_S = 60  # a watch ends server-side after this, and is taken up again
READ_TIMEOUT_S = 90.0  # a silent watch connection is dropped after this
BACKOFF_S = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
FAILURES = (k8s.ApiException, urllib3.exceptions.HTTPError, OSError, ValueError)


class Store(Mapping[Key, tuple[Any, ...]]):
    """What the objects of one kind contribute, by key; each key's values as a tuple, replaced
    (never changed in place) under a lock, so a reader in another thread never sees one
    half-written."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_uid: dict[str, tuple[str, Mapping[Key, Any]]] = {}  # uid -> (namespace, kept)
        self._by_key: dict[Key, dict[str, Any]] = {}  # key -> {uid: value}
        self._views: dict[Key, tuple[Any, ...]] = {}

    def __getitem__(self, key: Key) -> tuple[Any, ...]:
        return self._views[key]

    def __iter__(self) -> Iterator[Key]:
        return iter(list(self._views))

    def __len__(self) -> int:
        return len(self._views)

    def put(self, uid: str, namespace: str, kept: Mapping[Key, Any]) -> None:
        """The object ``uid`` as last seen: it contributes ``kept`` (nothing: it is dropped)."""
        with self._lock:
            self._put(uid, namespace, kept)

    def drop(self, uid: str) -> None:
        with self._lock:
            self._put(uid, "", {})

    def replace(
        self, namespace: str | None, listed: Mapping[str, tuple[str, Mapping[Key, Any]]]
    ) -> None:
        """A list of ``namespace`` (None: all) came in: it is all there is of it."""
        with self._lock:
            for uid, (ns, _) in list(self._by_uid.items()):
                if uid not in listed and namespace in (None, ns):
                    self._put(uid, "", {})
            for uid, (ns, kept) in listed.items():
                self._put(uid, ns, kept)

    def _put(self, uid: str, namespace: str, kept: Mapping[Key, Any]) -> None:
        _, before = self._by_uid.pop(uid, ("", {}))
        if kept:
            self._by_uid[uid] = (namespace, kept)
        for key in {*before, *kept}:
            values = self._by_key.setdefault(key, {})
            if key in kept:
                values[uid] = kept[key]
            else:
                values.pop(uid, None)
            if values:
                self._views[key] = tuple(values.values())
            else:
                self._by_key.pop(key, None)
                self._views.pop(key, None)


class GoneError(Exception):
    """The watch's version has expired (410): only a new list can go on."""


class Informer:
    """One kind in one namespace (or all: ``namespace`` None), kept in ``store`` by a daemon
    thread (``start``) until ``stop``."""

    def __init__(
        self,
        kind: str,
        lister: Lister,
        namespace: str | None,
        selector: str,
        trim: Trim,
        store: Store,
    ) -> None:
        self.kind, self.lister, self.namespace = kind, lister, namespace
        self.selector, self.trim, self.store = selector, trim, store
        self.listed = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Informer:
        where = self.namespace or "all namespaces"
        self._thread = threading.Thread(
            target=self._run, name=f"kafleet-watch-{self.kind}-{where}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # a watch under way ends at its next event or its timeout

    def _run(self) -> None:
        failures = 0
        where = self.namespace or "all namespaces"
        while not self._stopping.is_set():
            try:
                version = self.list()
                failures = 0
                while not self._stopping.is_set():
                    version = self.watch(version)
                continue
            except GoneError:
                log.debug("%s in %s: the watch expired; listing again", self.kind, where)
                continue
            except FAILURES as exc:  # the API server unreachable, a 5xx: list again, later
                log.warning("watching %s in %s failed: %s", self.kind, where, exc)
            except Exception:  # a defect: logged, and the watch goes on from a new list
                log.exception("watching %s in %s failed", self.kind, where)
            self._stopping.wait(BACKOFF_S[min(failures, len(BACKOFF_S) - 1)])
            failures += 1

    def _call(self, **kwargs: Any) -> Any:
        response = self.lister(label_selector=self.selector, _preload_content=False, **kwargs)
        if not 200 <= response.status <= 299:
            raise k8s.ApiException(http_resp=response)
        return response

    def list(self) -> str:
        """Everything there is, in pages, into the store; the version to watch from."""
        listed: dict[str, tuple[str, Mapping[Key, Any]]] = {}
        version, token = "", None
        while True:
            page = json.loads(self._call(limit=PAGE, _continue=token).data)
            meta = page.get("metadata") or {}
            version = version or str(meta.get("resourceVersion") or "")
            for obj in page.get("items") or ():
                listed[obj["metadata"]["uid"]] = (obj["metadata"]["namespace"], self.trim(obj))
            token = meta.get("continue")
            if not token:
                break
        self.store.replace(self.namespace, listed)
        self.listed.set()
        return version

    def watch(self, version: str) -> str:
        """Follow the changes from ``version`` until the server ends the watch; the version to
        go on from."""
        response = self._call(
            watch=True,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=WATCH_S,
            _request_timeout=(10.0, READ_TIMEOUT_S),
        )
        try:
            for line in response:  # urllib3's: one event a line
                if not line.strip():
                    continue
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise GoneError(obj.get("message"))
                    raise k8s.ApiException(status=obj.get("code"), reason=obj.get("message"))
                meta = obj.get("metadata") or {}
                version = str(meta.get("resourceVersion") or version)
                if kind in ("ADDED", "MODIFIED"):
                    self.store.put(meta["uid"], meta["namespace"], self.trim(obj))
                elif kind == "DELETED":
                    self.store.drop(meta["uid"])
                if self._stopping.is_set():
                    break
        finally:
            response.release_conn()
        return version
