"""One pass's autoscaling step: read the group's lag from Kafka, wish and decide replicas.

Owns: the histories the policies read (offsets for the time lag and the rates, wishes for the
stabilization windows, the recent scale ups for the HPA-style policies; ``histories.py``, sized
from the policy), when this process began watching the group (no scale down before a whole
window: a restart forgets the window), the failed reads in a row (``fallback``), the sidecars'
verdicts with ``exclude_persistent_lag``, writing the lag figures to the status, and scaling
through the ``scale`` subresource (as ``kubectl scale`` and an HPA do) and the Deployment in
the same pass, with an Event for every change. Returns the ``Degraded`` condition that reading
the lag gave and the ``Active`` one (lag over ``activation_lag``).

A read that fails is unknown, not zero: the replicas are held (or fall back), the pass says
``Degraded`` with the reason (``ShareClientUnavailable`` when the operator has no Java client
to read a share group's lag with, naming what to set). A topic that does not exist is named
(``Degraded``), and the group scales on the topics that do.

Does not own the policies (``scaling.py``), where the group reads its offsets and its reading
from the pass's snapshot (``lag_source.py``), a lag from a snapshot (``lag_reader.py``) or the
rest of a pass (``observer.py``).
"""

from __future__ import annotations

import calendar
import logging
import time
from collections.abc import Mapping
from typing import Any

import kopf
from confluent_kafka import KafkaException
from kubernetes import client as k8s

from kafleet_operator.policy import builders, histories, scaling
from kafleet_operator.policy.autopilot import Autoscaling
from kafleet_operator.policy.conditions import Condition, condition
from kafleet_operator.policy.spec import ParsedSpec
from kafleet_operator.reading import credentials, lag_reader, sidecars
from kafleet_operator.reconcile import kube, lag_source, metrics, quiet
from kafleet_operator.reconcile.kube import NotOwnedError, apply, post_event

log = logging.getLogger("kafleet.operator")
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def _memory(memo: Any, parsed: ParsedSpec, now: float) -> Any:
    """The group's memory, anew when it reads another group; horizons follow the policy."""
    worker, policy = parsed.worker, parsed.fleet.autoscaling or Autoscaling()
    if memo.get("reader_of") != (worker.bootstrap_servers, worker.group_id):
        memo["reader_of"] = (worker.bootstrap_servers, worker.group_id)
        memo["offsets"] = histories.Offsets(0.0)
        memo["wishes"] = histories.Wishes(0.0)
        memo["watched_since"] = now
        memo["steps"] = []
        memo["failures"] = 0
    memo["offsets"].horizon_s = histories.offsets_horizon_s(policy.target_time_lag_s)
    memo["wishes"].horizon_s = max(
        policy.scale_down_stabilization_s, policy.scale_up_stabilization_s
    )
    return memo


def at_rest(memo: Any) -> None:
    """What a pass at rest (``quiet.py``) leaves in the group's memory, as the full pass it
    stands for would have: the same offsets and the same wish, at this time (a lag after rest
    is timed from the last pass, not from a minute back; a scale-up window holds the wishes of
    the rest), and, without autoscaling, a scale-down window that starts again."""
    now = time.time()
    memo["offsets"].again(now)
    memo["wishes"].again(now)
    if memo.get(quiet.SCALING) == quiet.UNSCALED:
        memo["watched_since"] = now


def observe_lag(
    body: kopf.Body,
    parsed: ParsedSpec,
    status: kopf.Status,
    patch: kopf.Patch,
    memo: Any,
    replicas: int,
    ready: int,
    generation: int,
) -> tuple[Condition, list[Condition]]:
    """Read the lag, write its figures, scale; (the Degraded condition, [Active])."""
    worker, policy = parsed.worker, parsed.fleet.autoscaling
    now = time.time()
    memo = _memory(memo, parsed, now)
    memo[quiet.SCALING] = False  # until this pass finds nothing that moves by time
    namespace, name = body.metadata["namespace"], body.metadata["name"]
    try:
        reading = lag_source.reading(memo, parsed)
    except credentials.CredentialsError as exc:
        return _unreadable(body, parsed, patch, memo, replicas, exc.reason, f"{exc}")
    except lag_reader.LagUnreadableError as exc:
        return _unreadable(body, parsed, patch, memo, replicas, "LagUnreadable", f"{exc}")
    except KafkaException as exc:
        if lag_reader.is_share_client_missing(exc):
            reason, message = "ShareClientUnavailable", lag_reader.describe(exc)
        elif lag_reader.is_authentication_failure(exc):
            lag_source.forget_credentials(memo)  # read again next pass: they may be rotated
            message = (
                f"bootstrap_servers {worker.bootstrap_servers} refused the credentials of "
                f"spec.security: {lag_reader.describe(exc)}"
            )
            reason = "KafkaAuthenticationFailed"
        else:
            message = f"bootstrap_servers {worker.bootstrap_servers}: {lag_reader.describe(exc)}"
            reason = "KafkaUnreachable"
        return _unreadable(body, parsed, patch, memo, replicas, reason, message)
    if memo["failures"]:
        log.info(
            "%s/%s: lag read again (%d after %d failed reads)",
            namespace,
            name,
            reading.total,
            memo["failures"],
        )
    memo["failures"] = 0
    offsets: histories.Offsets = memo["offsets"]
    # The sums over one set of partitions: a topic or a first commit changes the set, and
    # the history starts again rather than read the jump as records (histories.py).
    known = {tp: c for tp, c in reading.committed.items() if c is not None}
    partitions = (frozenset(reading.ends), frozenset(known))
    total = reading.total
    offsets.add(now, reading.end_total, sum(known.values()), ready, partitions, total)
    # No lag, no time lag (as time_lag_s finds, without the history copied for it).
    time_lag = scaling.time_lag_s(offsets.ends(), reading.committed_total, now) if total else 0.0
    patch.status.update(
        {
            "lag": total,
            "maxPartitionLag": reading.max_partition,
            "partitions": reading.partitions,
            "timeLagSeconds": round(time_lag or 0.0, 1),
        }
    )
    if reading.missing_topics:
        degraded = condition(
            "Degraded",
            True,
            "TopicNotFound",
            f"topics {reading.missing_topics} (spec.topics) do not exist: scaling on the "
            f"{reading.partitions} partitions of the others",
            generation,
        )
    else:
        degraded = condition("Degraded", False, "Observed", "lag read from Kafka", generation)
    if policy is None:  # no autoscaling, or paused: a scale-down waits a window once it resumes
        memo["watched_since"] = now
        memo[quiet.SCALING] = quiet.UNSCALED
        return degraded, []
    active = reading.total > policy.activation_lag
    active_condition = condition(
        "Active",
        active,
        "LagOverActivation" if active else "LagAtOrUnderActivation",
        f"lag {reading.total} {'over' if active else 'at or under'} activation_lag "
        f"{policy.activation_lag}",
        generation,
    )
    if reading.partitions:
        lag = reading.total
        if policy.exclude_persistent_lag:
            lag = scaling.driving_lag(reading.lag, _persistent(namespace, name))
        input_rate, per_replica = offsets.rates(now)
        capacity = offsets.capacity(now, policy.lag_per_replica)
        rates = scaling.Rates(input_rate or 0.0, per_replica, capacity)
        share = worker.group_type == "share"
        wish = scaling.wanted(
            lag, reading.partitions, policy, time_lag, replicas, rates, share=share
        )
        memo["wishes"].add(now, wish)
        decision = scaling.decide(
            replicas,
            memo["wishes"].samples(),
            now,
            policy,
            ready=ready,
            watched_since=memo["watched_since"],
            steps=memo["steps"],
            since_scale_s=_since_scale(memo, status, now),
            rates_measured=scaling.measured(rates),
        )
        why = f"lag {lag} over {reading.partitions} partitions"
        _apply(body, parsed, patch, memo, decision, now, why)
        # A wish of the replicas there are is Steady whatever the windows hold: time alone
        # changes nothing while the lag stays 0 and no input is held for (quiet.py).
        still = total == 0 and not input_rate
        memo[quiet.SCALING] = still and wish == replicas == decision.replicas
    return degraded, [active_condition]


def _unreadable(
    body: kopf.Body,
    parsed: ParsedSpec,
    patch: kopf.Patch,
    memo: Any,
    replicas: int,
    reason: str,
    message: str,
) -> tuple[Condition, list[Condition]]:
    """The lag could not be read: hold the replicas, or fall back after the threshold. The
    scale-down window starts again: the wishes of before the outage say nothing of after it,
    so the first readings after it must not scale a fleet down (review of issue 21)."""
    memo["failures"] += 1
    memo["watched_since"] = time.time()
    if measured := metrics.of(memo):
        measured.lag_unreadable()
    generation = body.metadata.get("generation", 0)
    policy = parsed.fleet.autoscaling
    if policy is not None:
        decision = scaling.unreadable(replicas, memo["failures"], policy)
        why = f"lag unknown ({memo['failures']} failed reads in a row)"
        _apply(body, parsed, patch, memo, decision, time.time(), why)
        message += (
            f"; falling back to {decision.replicas} replicas"
            if decision.reason == "Fallback"
            else f"; holding {replicas} replicas"
        )
    if memo["failures"] == 1:  # the condition says so on every pass; the log, once
        namespace, name = body.metadata["namespace"], body.metadata["name"]
        log.warning("%s/%s: cannot read lag (%s): %s", namespace, name, reason, message)
    return condition("Degraded", True, reason, f"cannot read lag: {message}", generation), []


def _persistent(namespace: str, name: str) -> dict[str, str]:
    """Each partition's lag verdict, from the ready pods' sidecars."""
    statuses: dict[str, str] = {}
    for report in sidecars.read(namespace, name):
        for key, verdict in (report.status.get("lag_status") or {}).items():
            if statuses.get(key) not in scaling.PERSISTENT:
                statuses[key] = str(verdict)
    return statuses


def _deployment_to(body: kopf.Body, parsed: ParsedSpec, replicas: int) -> None:
    """The Deployment at the new count in the same pass, not after the reconcile that the
    new ``spec.replicas`` starts (kopf may have a queue of events before it); that
    reconcile then applies the same, which changes nothing."""
    owner = {"apiVersion": body["apiVersion"], "kind": body["kind"], "metadata": body.metadata}
    try:
        apply(builders.deployment(dict(owner), parsed, replicas))
    except (NotOwnedError, k8s.ApiException) as exc:  # the reconcile says why (Degraded)
        log.warning("%s: the Deployment waits for the reconcile: %s", body.metadata["name"], exc)


def _since_scale(memo: Any, status: Mapping[str, Any], now: float) -> float | None:
    last = memo.get("last_scale")
    if last is None and status.get("lastScaleTime"):  # before this process: the status says
        try:
            last = calendar.timegm(time.strptime(str(status["lastScaleTime"]), TIME_FORMAT))
        except ValueError:
            last = None
    return None if last is None else now - last


def _apply(
    body: kopf.Body,
    parsed: ParsedSpec,
    patch: kopf.Patch,
    memo: Any,
    decision: scaling.Decision,
    now: float,
    why: str,
) -> None:
    if not decision.changes:
        if decision.reason not in ("Steady", "External"):
            log.debug("%s: %s (%s)", body.metadata["name"], decision.reason, why)
        return
    if not kube.scale(body, decision.replicas, expected=decision.current):
        log.info(
            "%s/%s: not scaled from %d: the group has changed since this copy of it; the "
            "next pass decides again",
            body.metadata["namespace"],
            body.metadata["name"],
            decision.current,
        )
        return
    if decision.replicas > decision.current:
        memo["steps"] = [s for s in memo["steps"] if now - s[0] < 3600]
        memo["steps"].append((now, decision.current))
    memo["last_scale"] = now
    message = f"replicas {decision.current} -> {decision.replicas}: {why}"
    _deployment_to(body, parsed, decision.replicas)
    if measured := metrics.of(memo):
        measured.scaled(decision.current, decision.replicas)
    patch.status["lastScaleTime"] = time.strftime(TIME_FORMAT, time.gmtime(now))
    patch.status["lastScaleReason"] = decision.reason
    post_event(body, decision.reason, message)
    log.info("%s/%s: %s", body.metadata["namespace"], body.metadata["name"], message)
