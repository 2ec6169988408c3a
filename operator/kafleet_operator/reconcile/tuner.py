"""The one writer of the workers' ConfigMap, and each pass's tuning step.

Owns: writing a group's ConfigMap (``apply_config_map`` for the reconcile, ``tune`` for the
periodic pass), one group at a time (a lock per group: the reconcile runs on kopf's threads,
the pass on its own), each time from the live ConfigMap read just before, never from a copy
of the status. The ConfigMap records its own tuning in the ``kafleet.io/tuning`` annotation
(the value, the ``spec.max_poll_records`` it started from, when it was written) and the spec
generation it was built from (``kafleet.io/generation``): a pass holding an older copy of the
spec than the ConfigMap's leaves it alone, and the status only reports what the ConfigMap
holds. Every third pass (and at once after a spec change): the ready pods' cumulative handler
figures (``sidecars.py``), turned into the latency of the window since the last measure
(``tuning.window``; the previous figures live in the pass's memo), the ConfigMap as the
operator's watch holds it (read afresh before a write), the value each pod says it applied,
no step while the last change is still on its way to the pods, a step (``tuning.step``) with
an Event, and the status: the value asked for (``maxPollRecords``) and ``tuning`` (what the
pods applied, lowest and highest).

Does not own the policy (``tuning.py``), the ConfigMap's content (``builders.py``) or the rest
of a pass (``observer.py``).
"""

from __future__ import annotations

import datetime
import functools
import json
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import kopf
import yaml
from kubernetes import client as k8s

from kafleet_operator.policy import builders, tuning
from kafleet_operator.policy.spec import ParsedSpec
from kafleet_operator.reading import sidecars, watched
from kafleet_operator.reconcile import metrics, quiet
from kafleet_operator.reconcile.kube import NotOwnedError, apply, client, post_event

log = logging.getLogger("kafleet.operator")
TUNING = "kafleet.io/tuning"
GENERATION = "kafleet.io/generation"
COUNTERS = "tuning_counters"  # the pass's memo: each ready pod's figures at the last measure
PASSES, TUNED_GENERATION = "tuner_passes", "tuned_generation"  # the memo's, too
# The tuner measures every third pass (15 s at the default interval): a handler's latency over
# 15 s is steadier than over 5, and a thousand groups' sidecars are asked a third as often.
EVERY_PASSES = 3
Obj = dict[str, Any]

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's, where PyYAML has it
_locks: dict[tuple[str, str], threading.Lock] = {}
_locks_lock = threading.Lock()


def forget(namespace: str, name: str) -> None:
    """A group gone: its lock goes (a group made again under the name gets a new one)."""
    with _locks_lock:
        _locks.pop((namespace, name), None)


def _lock(namespace: str, name: str) -> threading.Lock:
    with _locks_lock:
        return _locks.setdefault((namespace, name), threading.Lock())


@dataclass(frozen=True)
class Live:
    """The ConfigMap as the API server holds it now."""

    tuned: tuning.Tuned | None
    generation: int
    max_poll_records: int | None


def _tuned(raw: str | None) -> tuning.Tuned | None:
    try:
        data = json.loads(raw or "")
        return tuning.Tuned(int(data["value"]), int(data["from"]), float(data["at"]))
    except (ValueError, TypeError, KeyError):
        return None


def _live(namespace: str, name: str, fetch: bool = True) -> Live | None:
    """The group's ConfigMap: read from the API server (``fetch``: before a write), else as
    the operator's watch holds it (``watched.py``: a pass that changes nothing reads no more)."""
    if fetch:
        try:
            cm = k8s.CoreV1Api(client()).read_namespaced_config_map(f"{name}-worker", namespace)
        except k8s.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return _parsed((cm.metadata.annotations if cm.metadata else None) or {}, cm.data or {})
    held = watched.config_map(namespace, name)
    if held is None:
        return None
    return _parsed(held["metadata"].get("annotations") or {}, held.get("data") or {})


@functools.lru_cache(maxsize=4096)
def _max_poll_records(worker_yaml: str) -> Any:
    """The ``max_poll_records`` of a worker's file (parsed once per text: every pass of every
    group reads it, and YAML is slow)."""
    data = yaml.load(worker_yaml, Loader=_LOADER) or {}
    return data.get("max_poll_records") if isinstance(data, dict) else None


def _parsed(annotations: Mapping[str, str], data: Mapping[str, str]) -> Live:
    try:
        generation = int(annotations.get(GENERATION, "0"))
        value = _max_poll_records(data.get("worker.yaml", ""))
    except (ValueError, yaml.YAMLError):
        generation, value = 0, None
    return Live(_tuned(annotations.get(TUNING)), generation, value)


def _value(parsed: ParsedSpec, held: tuning.Tuned | None) -> int:
    return held.value if held is not None else parsed.worker.max_poll_records


def _write(owner: Obj, parsed: ParsedSpec, generation: int, held: tuning.Tuned | None) -> None:
    cm = builders.config_map(owner, parsed, _value(parsed, held))
    annotations = {GENERATION: str(generation)}
    if held is not None:
        record = {"value": held.value, "from": held.start, "at": held.at}
        annotations[TUNING] = json.dumps(record, sort_keys=True)
    cm["metadata"]["annotations"] = annotations
    apply(cm)


def _owner(body: Mapping[str, Any]) -> Obj:
    return {
        "apiVersion": body["apiVersion"],
        "kind": body["kind"],
        "metadata": dict(body["metadata"]),
    }


def apply_config_map(body: Mapping[str, Any], parsed: ParsedSpec) -> int:
    """The reconcile's write (and ``owned.py``'s putting back): the ConfigMap of this spec,
    keeping the live tuning while it holds (``tuning.carried``), unless the live one was made
    from a newer generation of the spec; returns the ``max_poll_records`` it holds."""
    meta = body["metadata"]
    namespace, name, generation = meta["namespace"], meta["name"], meta.get("generation", 0)
    with _lock(namespace, name):
        live = _live(namespace, name)
        if live is not None and live.generation > generation:
            return live.max_poll_records or parsed.worker.max_poll_records  # a newer spec's
        before = live.tuned if live is not None else None
        held = tuning.carried(parsed.worker, parsed.fleet.tuning, before, time.time())
        _write(_owner(body), parsed, generation, held)
    value = _value(parsed, held)
    if live is not None and live.max_poll_records not in (None, value):
        message = f"max_poll_records {live.max_poll_records} -> {value}: " + (
            "the spec's value (tuning is off, or spec.max_poll_records changed)"
            if held is None or held.start == value
            else "the tuned value, clamped to the current bounds"
        )
        post_event(body, "MaxPollRecordsReset", message)
    return value


def _counters(report: sidecars.Report) -> tuning.Counters | None:
    latency = report.worker.get("handler_latency")
    if not isinstance(latency, dict):
        return None
    counts = latency.get("counts") or []
    uptime = float(report.worker.get("uptime_seconds") or 0.0)
    return tuning.Counters(int(sum(counts)), float(latency.get("sum", 0.0)), uptime)


def _applied(reports: list[sidecars.Report]) -> list[int]:
    values = (r.worker.get("max_poll_records") for r in reports)
    return [v for v in values if isinstance(v, int)]


def _iso(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def tune(body: kopf.Body, parsed: ParsedSpec, patch: kopf.Patch, memo: Any) -> None:
    """One pass's step: measure, maybe move ``max_poll_records``, report it in the status."""
    meta = body.metadata
    namespace, name, generation = meta["namespace"], meta["name"], meta.get("generation", 0)
    policy, worker = parsed.fleet.tuning, parsed.worker
    passes = memo[PASSES] = memo.get(PASSES, -1) + 1
    if passes % EVERY_PASSES and memo.get(TUNED_GENERATION) == generation:
        return  # between two measures (a new spec is judged at once)
    memo[TUNED_GENERATION] = generation
    memo[quiet.TUNING] = None  # until this measure finds nothing on its way to the pods
    pods = tuple(watched.ready_pods(namespace, name))  # the ones this measure asks
    reports = sidecars.read(namespace, name) if policy.enabled else []
    figures = {r.pod: c for r in reports if (c := _counters(r)) is not None}
    before = memo.get(COUNTERS) or {}
    latency, records = tuning.window(before, figures)
    # No handler ran over a window that covered every pod: nothing for the tuner to follow.
    idle = records == 0 and figures.keys() <= before.keys()
    memo[COUNTERS] = figures
    applied = _applied(reports)
    concurrency = max((int(r.worker.get("concurrency") or 0) for r in reports), default=0)
    concurrency = concurrency or worker.concurrency
    now = time.time()
    with _lock(namespace, name):
        for fetch in (False, True):  # as watched; read afresh before writing
            live = _live(namespace, name, fetch)
            if live is None:
                return  # the reconcile makes it
            if live.generation != generation:  # the reconcile has yet to write this spec's, or
                return  # already wrote a newer one than this pass's copy: it is the writer then
            held = tuning.carried(worker, policy, live.tuned, now)
            current = _value(parsed, held)
            waiting = held is not None and tuning.awaiting(current, applied, held.at, now)
            move = tuning.Step(current, "Steady")
            if held is not None and not waiting:
                limits = tuning.bounds(worker, policy)
                interval_s = worker.poll_interval_ms / 1000
                move = tuning.step(current, latency, concurrency, interval_s, limits, policy)
                if move.changes:
                    held = tuning.Tuned(move.max_poll_records, held.start, now)
            if held == live.tuned and live.max_poll_records == _value(parsed, held):
                break  # nothing to write
        else:
            try:
                _write(_owner(body), parsed, generation, held)
            except NotOwnedError as exc:  # the reconcile reports it (Degraded)
                log.warning("%s/%s: %s", namespace, name, exc)
                return
    value = _value(parsed, held)
    patch.status["maxPollRecords"] = value
    if held is None:
        patch.status["tuning"] = None
        memo[quiet.TUNING] = pods if idle else None
        return
    rejected = next(
        (r.worker["config_rejected"] for r in reports if r.worker.get("config_rejected")), None
    )
    pending = tuning.awaiting(value, applied, held.at, now)
    patch.status["tuning"] = {
        "from": held.start,
        "changedAt": _iso(held.at),
        "pods": len(applied),
        "appliedMin": min(applied, default=None),
        "appliedMax": max(applied, default=None),
        "pending": pending,
        "latencySeconds": latency,
        "rejected": rejected,
    }
    settled = idle and not pending and not move.changes and rejected is None
    memo[quiet.TUNING] = pods if settled else None
    if move.changes:
        message = (
            f"max_poll_records {current} -> {move.max_poll_records}: handlers take "
            f"{(latency or 0) * 1000:.1f} ms at concurrency {concurrency} ({records} records "
            "since the last pass)"
        )
        post_event(body, move.reason, message)
        log.info("%s/%s: %s", namespace, name, message)
        if measured := metrics.of(memo):
            measured.tuned()
