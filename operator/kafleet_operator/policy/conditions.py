"""A ConsumerGroup's status conditions, judged from what the periodic pass found.

Owns: the three conditions (``Ready``, ``Progressing``, ``Degraded``, each with a reason and a
message) as a pure function of the facts: whether the spec is valid (the problems name their
fields), whether the last apply of this generation failed (the API server's message, or the
operator's refusal of an object it does not own), whether the Deployment exists, whether its
rollout is done (``rollout``: the new template's replicas all updated and ready, no old pod
left, as ``kubectl rollout status`` judges) and how many replicas are ready, and what reading
the lag said; the pause conditions (``Paused``, KEDA's; ``ReconciliationPaused``, Strimzi's),
present only while their annotation is; and merging them into the current list, keeping a
condition's ``lastTransitionTime`` while its status does not change and dropping a pause
condition whose annotation went. Every state gets its conditions, an absent Deployment
included: a group is never left without a word. No I/O: tested without a cluster.

Does not own gathering the facts or writing the status (``observer.py``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kafleet_operator.policy import pause

Condition = dict[str, Any]
# Conditions that exist only while their cause (an annotation) does: a judgement without one
# removes it from the list.
TRANSIENT = ("Paused", "ReconciliationPaused")


def condition(kind: str, ok: bool, reason: str, message: str, generation: int) -> Condition:
    return {
        "type": kind,
        "status": "True" if ok else "False",
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def merged(
    current: Sequence[Mapping[str, Any]] | None,
    new: Iterable[Condition],
    gone: Iterable[str] = (),
) -> list[Condition]:
    """Conditions merged by type, keeping a transition time when the status did not change;
    a ``TRANSIENT`` condition absent from ``new`` is removed, as is every type in ``gone``
    (``Active`` once autoscaling is off or paused: a verdict nothing refreshes any more)."""
    new = list(new)
    judged = {c["type"] for c in new}
    dropped = set(gone) - judged
    by_type = {
        c["type"]: dict(c)
        for c in current or []
        if (c["type"] not in TRANSIENT or c["type"] in judged) and c["type"] not in dropped
    }
    for cond in new:
        old = by_type.get(cond["type"])
        if old and old.get("status") == cond["status"]:
            cond = {**cond, "lastTransitionTime": old.get("lastTransitionTime")}
        by_type[cond["type"]] = cond
    return [by_type[k] for k in sorted(by_type)]


@dataclass(frozen=True)
class Facts:
    """What one pass found about a group of generation ``generation``."""

    generation: int
    invalid: str | None = None  # the spec's problems, each naming its field
    apply_failure: str | None = None  # the API server's refusal of this generation's objects
    applied: int | None = None  # the generation whose objects were last applied
    replicas: int | None = None  # the Deployment's desired replicas; None: no Deployment
    ready: int = 0  # its ready replicas
    lag: Condition | None = None  # the Degraded condition reading the lag gave, if read
    rolling: str | None = None  # what the Deployment's rollout still waits for (``rollout``)
    refusal: str = "ApplyFailed"  # the reason of ``apply_failure`` (NotOwned: not ours)
    paused: pause.Pause = field(default_factory=pause.Pause)  # what the group's annotations pause


def rollout(
    generation: int,
    observed_generation: int | None,
    replicas: int,
    current: int | None,
    updated: int | None,
    available: int | None,
) -> str | None:
    """What a Deployment's rollout still waits for, or None when it is done (``kubectl
    rollout status``'s judgement): the controller has seen the latest template, every replica
    runs it, no old pod is left, and the new ones are available."""
    if (observed_generation or 0) < generation:
        return f"the Deployment's generation {generation} is not yet observed by its controller"
    updated, current, available = updated or 0, current or 0, available or 0
    if updated < replicas:
        return f"{updated} of {replicas} replicas updated to the new template"
    if current > updated:
        return f"{current - updated} old replicas still terminating"
    if available < updated:
        return f"{available} of {updated} updated replicas available"
    return None


def judge(facts: Facts) -> list[Condition]:
    """Ready, Progressing and Degraded for these facts, and the pause conditions if paused."""
    return [*_judged(facts), *_paused(facts.paused, facts.generation)]


def _judged(facts: Facts) -> list[Condition]:
    g = facts.generation
    if facts.invalid is not None:
        return [
            condition("Degraded", True, "InvalidSpec", facts.invalid, g),
            condition("Ready", False, "InvalidSpec", facts.invalid, g),
            condition("Progressing", False, "InvalidSpec", "fix the spec", g),
        ]
    if facts.apply_failure is not None:
        progressing = condition(
            "Progressing",
            False,
            facts.refusal,
            f"the objects of generation {g} were refused; fix the spec"
            if facts.refusal == "ApplyFailed"
            else f"the objects of generation {g} are not all applied: {facts.refusal}",
            g,
        )
        degraded = condition("Degraded", True, facts.refusal, facts.apply_failure, g)
    else:
        applied = facts.applied == g
        rolling = applied and facts.replicas is not None and facts.rolling is not None
        progressing = condition(
            "Progressing",
            applied,
            "RollingOut" if rolling else "Applied" if applied else "Reconciling",
            f"rolling out generation {g}: {facts.rolling}"
            if rolling
            else f"Deployment, ConfigMap and Service applied for generation {g}"
            if applied
            else f"applying generation {g} (last applied: {facts.applied})",
            g,
        )
        degraded = facts.lag or condition("Degraded", False, "Observed", "nothing wrong seen", g)
    return [progressing, _ready(facts), degraded]


def _ready(facts: Facts) -> Condition:
    g = facts.generation
    if facts.replicas is None:
        if facts.apply_failure is not None:
            reason, why = "NoDeployment", f"its apply was refused: {facts.refusal}"
        elif facts.applied is None:
            reason, why = "NoDeployment", "not applied yet"
        else:
            reason, why = "DeploymentMissing", "it was applied and is gone; it is put back"
            if facts.paused.reconciliation:
                why = "it was applied and is gone; reconciliation is paused"
        return condition("Ready", False, reason, f"the Deployment does not exist: {why}", g)
    counted = f"{facts.ready} of {facts.replicas} replicas ready"
    if facts.rolling is not None:
        return condition("Ready", False, "RollingOut", f"{facts.rolling}; {counted}", g)
    ok = facts.ready >= facts.replicas
    return condition("Ready", ok, "AllReplicasReady" if ok else "ReplicasNotReady", counted, g)


def _paused(held: pause.Pause, g: int) -> list[Condition]:
    out = []
    if held.replicas is not None:
        message = (
            f"the Deployment is held at {held.replicas} replicas ({pause.PAUSED_REPLICAS}) and "
            "autoscaling is stopped until the annotation is removed"
        )
        out.append(condition("Paused", True, "PausedReplicas", message, g))
    elif held.problem is not None and pause.PAUSED_REPLICAS in held.problem:
        out.append(condition("Paused", False, "InvalidAnnotation", held.problem, g))
    if held.reconciliation:
        message = (
            f"{pause.PAUSE_RECONCILIATION} is true: nothing is applied, scaled or tuned, and a "
            "deleted or edited object is not put back, until it is removed or false"
        )
        out.append(condition("ReconciliationPaused", True, "ReconciliationPaused", message, g))
    elif held.problem is not None and pause.PAUSE_RECONCILIATION in held.problem:
        message = held.problem
        out.append(condition("ReconciliationPaused", False, "InvalidAnnotation", message, g))
    return out
