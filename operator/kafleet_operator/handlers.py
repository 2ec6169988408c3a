"""The kopf handlers: thin shims from kopf's events to the operator's work.

Owns: kopf's settings (one startup handler), and which event runs what: every event of a group
keeps it for the periodic pass (``watched.remember``); create, update and resume reconcile a
group (``reconcile/applying.py``); every event of a group checks its pause annotations
(``applying.pause_changed``: kopf leaves annotations under its storage prefix, ``kafleet.io/``,
out of the diff, so no update handler sees them); every event of an owned object may put it
back (``owned.on_event``); startup and cleanup start and stop the watches of what the groups own
(``reading/watched.py``) and the periodic pass (``periodic.py``, running
``observer.observe_group`` for each group: conditions, lag, scaling, tuning). Nothing is decided
here.

No ``@kopf.index``: kopf holds every handler until its indexes are filled, and fills them in
time quadratic in the objects it watches (a restart over 3,000 groups passed none in 8
minutes); the operator's own watches (``reading/informers.py``) say when they have listed a
namespace, and the pass waits for that alone.

No finalizer: nothing has to happen before a ConsumerGroup goes (owner references take its
objects with it), and no handler asks kopf for one (no ``on.delete``, no timer or daemon), so
a group is deleted at once even while the operator is down.

Replicas: ``spec.replicas`` is the one source (the ``scale`` subresource writes it, so
``kubectl scale``, an HPA or KEDA work); internal autoscaling writes it the same way. While
``kafleet.io/paused-replicas`` is set the Deployment is held at that count instead, and while
``kafleet.io/pause-reconciliation`` is true nothing is applied (``pause.py``).

Owned objects: every Deployment, ConfigMap and Service labelled managed-by kafleet-operator is
watched (a server-side label selector); one deleted, or changed by someone other than this
process, is put back from its group (``owned.py``), so a deleted fleet comes back at once and a
hand edit of the image, the probes or the replicas is reverted. An object of the same name
that the group does not control is never taken over: the reconcile records ``NotOwned``
naming it (``Degraded``) and retries with backoff, so the name is taken once it is free.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from typing import Any

import kopf

from kafleet_operator.policy.crd import GROUP, PLURAL, VERSION
from kafleet_operator.reading import watched
from kafleet_operator.reconcile import (
    applying,
    kube,
    lag_source,
    leadership,
    observer,
    owned,
    periodic,
)

# `kafleet operator --interval-s` sets this (before this module loads).
INTERVAL_S = float(os.environ.get("KAFLEET_OPERATOR_INTERVAL_S", "5"))
# `kafleet operator` with no --namespace sets this: the owned objects are watched cluster-wide,
# in one watch a kind; else (and under `kopf run`) in each namespace that holds a group.
CLUSTERWIDE = os.environ.get("KAFLEET_OPERATOR_CLUSTERWIDE") == "1"
log = logging.getLogger("kafleet.operator")
MANAGED = watched.MANAGED
OWNED = (("apps", "v1", "deployments"), ("v1", "configmaps"), ("v1", "services"))


class QuietWatchers(logging.Filter):
    """Leaves out kopf's "Handler 'x' succeeded." for the event handlers that run on every
    status write and every event of an owned object (a dozen lines a minute per idle group);
    what they do, they log themselves."""

    NOISY = tuple(
        f"Handler '{name}' succeeded." for name in ("remember", "pause_changed", "put_back")
    )

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() not in self.NOISY


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    logging.getLogger("kopf.objects").addFilter(QuietWatchers())
    # Everything kopf writes on resources is named under kafleet.io, not kopf.zalando.org.
    # No handler needs a finalizer; kopf removes this one from groups an older operator marked.
    settings.persistence.finalizer = "kafleet.io/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="kafleet.io")
    settings.persistence.diffbase_storage = LedDiffBase(
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
    for resource in OWNED:
        settings.watching.label_selectors[resource] = watched.SELECTOR


@kopf.on.startup()
async def start_observing(memo: kopf.Memo, **_: Any) -> None:
    # The owned objects' watches (the pods', for their sidecars' addresses, too).
    watched.start(kube.watch_client(), CLUSTERWIDE)
    pass_ = periodic.run(
        watched.groups, observe, lag_source.target, INTERVAL_S, observed=observed, kept=held
    )
    memo["observing"] = asyncio.get_running_loop().create_task(pass_)


@kopf.on.cleanup()
async def stop_observing(memo: kopf.Memo, **_: Any) -> None:
    task = memo.get("observing")
    if task is not None:
        task.cancel()
    watched.stop()
    # Leaving: the Leases go back at once, so a standby leads within its next step.
    await asyncio.to_thread(leadership.stop)


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL)
def reconcile(
    body: kopf.Body, status: kopf.Status, patch: kopf.Patch, retry: int, **_: Any
) -> None:
    with _leading():
        applying.reconcile(body, status, patch, retry)


@kopf.on.event(GROUP, VERSION, PLURAL)
async def remember(type: str | None, body: kopf.Body, **_: Any) -> None:
    """Every group as last seen, for the periodic pass and the put-backs (gone when deleted); a
    coroutine: three thousand groups listed cost no trip through kopf's threads."""
    watched.remember(type, body)


@kopf.on.event(GROUP, VERSION, PLURAL)
def pause_changed(type: str, body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    """A pause annotation added, changed or removed: apply the group's objects as they should
    be now. The first sight of a group is the create or resume handler's."""
    with _leading():
        applying.pause_changed(type, body, patch)


@kopf.on.event(*OWNED[0], labels=MANAGED)
@kopf.on.event(*OWNED[1], labels=MANAGED)
@kopf.on.event(*OWNED[2], labels=MANAGED)
def put_back(type: str, body: kopf.Body, **_: Any) -> None:
    """An owned object deleted, or changed by anyone but this process: put back."""
    with _leading():
        owned.on_event(type, body, watched.groups)


@contextlib.contextmanager
def _leading() -> Iterator[None]:
    """A handler whose group's shard was lost while it ran has written nothing since (the
    fence, ``leadership.writing``): it ends as done, so kopf writes no retry on the group; the
    shard's leader adopts the group: a new leader, or this pod once its late renewal is through
    (``applying.fenced``)."""
    try:
        yield
    except leadership.NotLeaderError as exc:
        log.info("%s: left to the pass of the shard's leader (this pod's once renewed)", exc)


class LedDiffBase(kopf.AnnotationsDiffBaseStorage):
    """kopf's last-handled configuration, written only by the pod that leads the group's
    shard: kopf stores it after every change even when no handler acted, and a standby that
    wrote it would make the leader see no change (and write besides)."""

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        if leadership.owns_body(body):
            super().store(body=body, patch=patch, essence=essence)


def observed(body: Mapping[str, Any]) -> bool:
    """Whether the periodic pass observes the group: this pod leads its shard (another pod's
    groups are forgotten here, their metrics with them; a group of a shard still held, whose
    renewal is late, is only passed over: ``held``), the watches of its namespace have listed
    what it owns, and kopf has handed it over (created, updated, resumed) or its status says its
    generation is applied: after a restart, a settled group need not wait for kopf to resume
    it (thousands of resumes take minutes, and change nothing)."""
    meta = body["metadata"]
    uid = str(meta["uid"])
    if not leadership.holds_body(body):
        applying.let_go(body)
        return False
    if not leadership.owns_body(body) or not watched.ready(str(meta["namespace"])):
        return False
    return uid in applying.listed or applying.applied(body)


def held(body: Mapping[str, Any]) -> bool:
    """Whether the pass keeps its memory of a group it does not observe now: its shard is still
    this pod's, a renewal late (a slow API server), so its series and windows stay."""
    return leadership.holds_body(body)


def observe(body: Mapping[str, Any], memo: dict[str, Any]) -> None:
    """One pass of a led group: adopted first if this pod came to lead it since kopf handed it
    over (``applying.adopt``)."""
    with _leading():
        if str(body["metadata"]["uid"]) not in applying.reconciled:
            fresh = applying.adopt(body)  # read afresh: this pod's copy may be behind
            if fresh is None:
                return
            body = fresh
        observer.observe_group(body, memo)
