"""One periodic pass over one ConsumerGroup: observe it, write its status, scale, tune.

Owns: what a pass does (``periodic.py`` runs one per group every interval): validate the spec
(an invalid one is reported ``InvalidSpec`` naming the fields), read the Deployment's
readiness (its absence too), the group's lag from Kafka (connecting as the workers do, with
the passwords of the Secrets the spec names) and the handlers' figures from the sidecars;
judge the conditions (``conditions.py``) from those facts and an apply the API server refused
(``status.applyFailure``, recorded by the reconcile); write the status in one merge patch;
then scale (``autoscaler.py``) and tune ``max_poll_records`` (``tuner.py``).

Does not own when passes run (``periodic.py``), the kopf handlers (``handlers.py``) or the
policies.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any, cast

import kopf
from kubernetes import client as k8s

from kafleet.errors import ConfigError
from kafleet_operator.policy import builders, conditions, pause
from kafleet_operator.policy.spec import ParsedSpec, parse_spec
from kafleet_operator.reading import watched
from kafleet_operator.reconcile import autoscaler, metrics, owned, quiet, tuner
from kafleet_operator.reconcile.kube import controller, patch_status

log = logging.getLogger("kafleet.operator")
LIVE = ("lag", "maxPartitionLag", "timeLagSeconds")
REFRESH_S = 30.0  # the live figures in the status are at most this old, while they change


def _set_conditions(
    status: Mapping[str, Any], patch: kopf.Patch, *new: dict[str, Any], gone: tuple[str, ...] = ()
) -> None:
    patch.status["conditions"] = conditions.merged(status.get("conditions"), new, gone)


def parse(
    body: kopf.Body, status: kopf.Status, patch: kopf.Patch, memo: Any = None
) -> ParsedSpec | None:
    """The spec, validated; an invalid one is reported ``InvalidSpec``. A pass's ``memo``
    keeps the last one by generation (the spec changes only with it)."""
    generation = body.metadata.get("generation", 0)
    cached = memo.get("parsed") if memo is not None else None
    if cached is not None and cached[0] == generation:
        return cast(ParsedSpec, cached[1])
    try:
        parsed = parse_spec(dict(body.spec))
    except ConfigError as exc:
        message = "; ".join(str(p) for p in exc.problems)
        facts = conditions.Facts(generation, invalid=message, paused=pause.read(body.metadata))
        _set_conditions(status, patch, *conditions.judge(facts))
        patch.status["observedGeneration"] = generation
        return None
    if memo is not None:
        memo["parsed"] = (generation, parsed)
    return parsed


def observe_group(raw: Mapping[str, Any], memo: dict[str, Any]) -> None:
    """One periodic pass over one group (``periodic.run`` calls it): observe, write status;
    or, for a group at rest whose inputs have not changed (``quiet.py``), nothing more."""
    started = time.monotonic()
    meta = raw["metadata"]
    group_id = (raw.get("spec") or {}).get("group_id", "")
    taken = quiet.inputs(raw, memo)
    if str(meta.get("uid")) not in pause.UNAPPLIED and quiet.unchanged(memo, taken):
        autoscaler.at_rest(memo)
        metrics.series(memo, meta["namespace"], meta["name"], group_id).rested()
        return
    body = kopf.Body(cast(kopf.RawBody, raw))  # the watch's own copy; a pass only reads it
    patch = kopf.Patch()
    measured = metrics.series(memo, meta["namespace"], meta["name"], group_id)
    retry = pause.UNAPPLIED.pop(str(meta.get("uid")), None)
    if retry is not None:
        retry(body, patch)  # a pause change that could not be applied: again (it may re-add)
    try:
        observe(body, body.status, patch, memo)
    except Exception:
        quiet.after(memo, None, False)
        measured.passed({}, time.monotonic() - started, ok=False)
        raise
    held = pause.read(meta)
    replicas = body.spec.get("replicas")
    if isinstance(replicas, int) and not isinstance(replicas, bool):
        replicas = held.deployment_replicas(replicas)
    measured.passed(
        patch.get("status") or {}, time.monotonic() - started, True, replicas, held.scaling
    )
    now = time.monotonic()
    current = _latest(body, memo)
    found = patch.get("status") or {}
    quiet.after(memo, taken, said(current, found) and retry is None)
    if worth_writing(current, found, now - memo.get("written_at", 0.0)):
        try:
            written = patch_status(body, patch["status"])
            memo["written_at"] = now
            memo["written"] = (_version(written), written.get("status") or {})
            metrics.STATUS_WRITES.inc()
        except k8s.ApiException as exc:
            if exc.status not in (404, 409, 422):  # gone, or made again (another uid)
                raise
            log.info("%s/%s is gone", body.metadata["namespace"], body.metadata["name"])


def _version(obj: Mapping[str, Any]) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


def _latest(body: Mapping[str, Any], memo: Any) -> Mapping[str, Any]:
    """The group's status as it is now: the watch's copy, or what this process last wrote
    when the watch has not caught up with it yet (on a busy API server it may be passes
    behind, and a pass would write the same again, and again). resourceVersions are compared
    as the numbers etcd makes them."""
    mine = memo.get("written")
    if mine is not None and mine[0] > _version(body):
        return cast(Mapping[str, Any], mine[1])
    return cast(Mapping[str, Any], body.get("status") or {})


def _present(value: Any) -> Any:
    """A status as the API server keeps it: a merge patch's ``None`` removes a field, at any
    depth, so a field written ``None`` reads back absent."""
    if isinstance(value, Mapping):
        return {k: _present(v) for k, v in value.items() if v is not None}
    return value


def _meaning(status: Mapping[str, Any]) -> dict[str, Any]:
    """What of a status is news: all but the live figures (``LIVE``: the operator's
    ``/metrics`` has them every pass) and the words of the conditions."""
    kept = {k: v for k, v in _present(status).items() if k not in LIVE}
    if isinstance(kept.get("conditions"), list):
        kept["conditions"] = sorted(
            tuple(str(c.get(k)) for k in ("type", "status", "reason", "observedGeneration"))
            for c in kept["conditions"]
        )
    if isinstance(kept.get("tuning"), dict):
        kept["tuning"] = {k: v for k, v in kept["tuning"].items() if k != "latencySeconds"}
    return kept


def said(current: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether the status says all of ``new`` already, to the figure."""
    return bool(_present({k: current.get(k) for k in new}) == _present(new))


def worth_writing(current: Mapping[str, Any], new: Mapping[str, Any], since_s: float) -> bool:
    """Whether a pass writes the status it found: when it says something the status does
    not (a condition, a decision, a count), or its live figures changed and the last write
    is ``REFRESH_S`` old. A group at rest costs the API server no write."""
    if not new:
        return False
    before = {k: current.get(k) for k in new}
    if _meaning(new) != _meaning(before):
        return True
    return not said(current, new) and since_s >= REFRESH_S


def _level(
    body: kopf.Body,
    parsed: ParsedSpec,
    held: pause.Pause,
    deployment: Any,
    memo: Any,
    settled: bool,
) -> None:
    """Put back a Deployment that has drifted from the spec for two passes in a row (one pass
    may read the group a moment before the reconcile of its last edit)."""
    found = None
    if deployment is not None and settled and not held.reconciliation:
        generation = body.metadata.get("generation", 0)
        hashed = memo.get("config_hash")
        if hashed is None or hashed[0] != generation:  # the spec changes only with it
            hashed = memo["config_hash"] = (generation, builders.config_hash(parsed))
        found = owned.drift(deployment, parsed, held, hashed[1])
    memo[quiet.LEVEL] = found is None  # a drift, put back or not, is no rest this pass
    if found is not None and memo.get("drift") == found:
        # Judged again from the group as the API server holds it now: the watch's copy may
        # be passes behind a scale (a put-back from it would undo the scale).
        latest = owned.latest(body)
        if latest is not None and owned.drift(deployment, *_judged(latest)):
            owned.put_back("Deployment", latest, False, f"drifted ({found})")
        found = None
    memo["drift"] = found


def _judged(group: Mapping[str, Any]) -> tuple[Any, pause.Pause]:
    try:
        return parse_spec(dict(group.get("spec") or {})), pause.read(group["metadata"])
    except ConfigError:
        return None, pause.Pause(reconciliation=True)  # nothing right to put back


def observe(
    body: kopf.Body,
    status: kopf.Status,
    patch: kopf.Patch,
    memo: Any,
    **_: Any,
) -> None:
    """Readiness from the Deployment, lag from Kafka, the conditions; then scale and tune."""
    parsed = parse(body, status, patch, memo)
    if parsed is None:
        return
    name, namespace = body.metadata["name"], body.metadata["namespace"]
    generation = body.metadata.get("generation", 0)
    failure = status.get("applyFailure") or {}
    refused = failure.get("message") if failure.get("generation") == generation else None
    held = pause.read(body.metadata)  # kafleet.io/paused-replicas, pause-reconciliation
    applied = status.get("appliedGeneration")
    deployment = watched.deployment(namespace, name)
    if deployment is not None:
        ref = controller(deployment["metadata"].get("ownerReferences"))
        if (ref or {}).get("uid") != body.metadata.get("uid"):
            deployment = None  # someone else's of the same name (NotOwned): not this fleet
    elif refused is None and applied is not None and not held.reconciliation:
        owned.put_back("Deployment", body, True, "missing")  # in case its watch event was lost
    _level(body, parsed, held, deployment, memo, refused is None and applied == generation)
    replicas: int | None = None
    rolling: str | None = None
    observed: dict[str, Any] = {}
    if deployment is not None:
        replicas = deployment["spec"].get("replicas") or 0
        observed = deployment.get("status") or {}
        rolling = conditions.rollout(
            deployment["metadata"].get("generation") or 0,
            observed.get("observedGeneration"),
            replicas,
            observed.get("replicas"),
            observed.get("updatedReplicas"),
            observed.get("availableReplicas"),
        )
    ready = observed.get("readyReplicas") or 0
    patch.status["replicas"] = observed.get("replicas") or 0
    patch.status["readyReplicas"] = ready
    patch.status["labelSelector"] = builders.selector(name)
    # Scaling starts from spec.replicas, the one source: the Deployment may lag behind it.
    replicas_wanted = parsed.fleet.replicas
    # Paused (either annotation): the lag is read and reported, never acted on.
    scaled = parsed if not held.scaling else pause.without_autoscaling(parsed)
    lag, active = autoscaler.observe_lag(
        body, scaled, status, patch, memo, replicas_wanted, ready, generation
    )
    facts = conditions.Facts(
        generation, None, refused, applied, replicas, ready, lag, rolling,
        failure.get("reason") or "ApplyFailed", held,
    )  # fmt: skip
    unscaled = parsed.fleet.autoscaling is None or held.scaling
    gone = ("Active",) if unscaled else ()
    _set_conditions(status, patch, *conditions.judge(facts), *active, gone=gone)
    if deployment is not None and not held.reconciliation:
        tuner.tune(body, parsed, patch, memo)
