"""Leadership in this process: which ConsumerGroups this operator pod may write now.

Owns: the process's one answer to "do I reconcile ``namespace/name``?" (``owns``), the thread
that keeps the shards' Leases (``start``: an ``Elector`` step every ``retry_s``; a step that
fails is logged and tried again, and a pod that cannot renew stops owning at the renew
deadline, before anyone else may take over), the fence every write of a group passes
(``writing``: ``NotLeaderError`` once the group's shard is no longer led, so a reconcile that
started as leader writes nothing after it lost the Lease), and giving the Leases back on
leaving (``stop``: no write starts after it began, and those under way end before the Leases
are released, so the next leader never writes beside one of them).

With no elector (``kafleet operator --shards 0``, the default outside the chart) this process
is the only operator and owns every group, as before there were shards.

Does not own the rules of Leases and shards (``policy/leases.py``, ``policy/shards.py``), the
Lease edge (``elector.py``) nor what owning a group means to the handlers and the pass
(``handlers.py``, ``periodic.py``, ``applying.py``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import urllib3
from kubernetes import client as k8s

from kafleet.errors import KafleetError
from kafleet_operator.reconcile import metrics
from kafleet_operator.reconcile.elector import Elector

log = logging.getLogger("kafleet.operator")
_elector: Elector | None = None
_stopping = threading.Event()
_thread: threading.Thread | None = None
_left = False  # this pod has given its Leases back: it owns nothing any more
_writes = 0  # writes under way (``writing``)
_quiet = threading.Condition()
FAILURES = (k8s.ApiException, urllib3.exceptions.HTTPError, OSError)
LEAVE_WAIT_S = 10.0  # how long a leaving pod waits for its writes under way


class NotLeaderError(KafleetError):
    """A write for a group whose shard this pod does not lead (any more)."""

    def __init__(self, namespace: str, name: str) -> None:
        self.namespace, self.name = namespace, name
        super().__init__(f"{namespace}/{name}: this operator pod does not lead its shard")


def owns(namespace: str, name: str) -> bool:
    """Whether this pod reconciles the group ``namespace/name`` now."""
    if _left:
        return False
    elector = _elector
    return elector is None or elector.owns(namespace, name)


def holds(namespace: str, name: str) -> bool:
    """Whether this pod held the group's shard at its last step, even if a renewal is late
    (``owns`` is then False: no write): its memory of the group is kept meanwhile."""
    if _left:
        return False
    elector = _elector
    return elector is None or elector.holds(namespace, name)


def holds_body(body: Mapping[str, Any]) -> bool:
    meta = body.get("metadata") or {}
    return holds(str(meta.get("namespace")), str(meta.get("name")))


def owns_body(body: Mapping[str, Any]) -> bool:
    meta = body.get("metadata") or {}
    return owns(str(meta.get("namespace")), str(meta.get("name")))


@contextlib.contextmanager
def writing(namespace: str, name: str) -> Iterator[None]:
    """Around each write of a group's objects: raises ``NotLeaderError`` unless this pod owns
    the group, and holds a leaving pod's Leases until the write has ended."""
    global _writes
    with _quiet:
        if not owns(namespace, name):
            raise NotLeaderError(namespace, name)
        _writes += 1
    try:
        yield
    finally:
        with _quiet:
            _writes -= 1
            _quiet.notify_all()


def elected() -> bool:
    """Whether this process shares the groups with others through Leases."""
    return _elector is not None


def start(elector: Elector, retry_s: float) -> None:
    """Keep ``elector``'s Leases from now on, a step every ``retry_s``, in a thread; the first
    step is taken before this returns, so the groups of the shards it took are owned at once."""
    global _elector, _thread, _left
    _elector, _left = elector, False
    _stopping.clear()
    metrics.SHARDS.set(elector.count)
    _step(elector)
    _thread = threading.Thread(
        target=_keep, args=(elector, retry_s), name="kafleet-leases", daemon=True
    )
    _thread.start()


def _step(elector: Elector) -> None:
    try:
        elector.step()
    except FAILURES as exc:  # the API server unreachable, say: owns() lapses at the deadline
        log.warning("keeping the operator's Leases failed: %s", exc)
    metrics.SHARDS_LED.set(len(elector.led))


def _keep(elector: Elector, retry_s: float) -> None:
    """A step every ``retry_s`` from the start of the last, not ``retry_s`` after its end: steps
    slowed by the API server must not space renewals past the renew deadline."""
    started = time.monotonic()
    while not _stopping.wait(max(0.0, started + retry_s - time.monotonic())):
        started = time.monotonic()
        _step(elector)


def stop() -> None:
    """Stop stepping and give back every Lease this pod holds (a clean leave: the others take
    its shards at their next step, not a Lease duration later)."""
    global _thread, _left
    elector, thread = _elector, _thread
    if elector is None or _left:
        return
    _stopping.set()
    if thread is not None:
        thread.join(timeout=10)
    with _quiet:  # owns nothing from here: no write starts; those under way end first
        _left, _thread = True, None
        if not _quiet.wait_for(lambda: _writes == 0, timeout=LEAVE_WAIT_S):
            log.warning("leaving with %d writes still under way", _writes)
    try:
        elector.release()
    except FAILURES as exc:
        log.warning("releasing the operator's Leases failed: %s", exc)
    metrics.SHARDS_LED.set(0)
