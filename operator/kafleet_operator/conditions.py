"""A ConsumerGroup's status conditions, judged from what the periodic pass found.

Owns: the three conditions (``Ready``, ``Progressing``, ``Degraded``, each with a reason and a
message) as a pure function of the facts: whether the spec is valid (the problems name their
fields), whether the last apply of this generation failed (the API server's message), whether
the Deployment exists and how many of its replicas are ready, and what reading the lag said;
and merging them into the current list, keeping a condition's ``lastTransitionTime`` while its
status does not change. Every state gets its conditions, an absent Deployment included: a
group is never left without a word. No I/O: tested without a cluster.

Does not own gathering the facts or writing the status (``observer.py``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Condition = dict[str, Any]


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
    current: Sequence[Mapping[str, Any]] | None, new: Iterable[Condition]
) -> list[Condition]:
    """Conditions merged by type, keeping a transition time when the status did not change."""
    by_type = {c["type"]: dict(c) for c in current or []}
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


def judge(facts: Facts) -> list[Condition]:
    """Ready, Progressing and Degraded for these facts."""
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
            "ApplyFailed",
            f"the objects of generation {g} were refused; fix the spec",
            g,
        )
        degraded = condition("Degraded", True, "ApplyFailed", facts.apply_failure, g)
    else:
        applied = facts.applied == g
        progressing = condition(
            "Progressing",
            applied,
            "Applied" if applied else "Reconciling",
            f"Deployment, ConfigMap and Service applied for generation {g}"
            if applied
            else f"applying generation {g} (last applied: {facts.applied})",
            g,
        )
        degraded = facts.lag or condition("Degraded", False, "Observed", "nothing wrong seen", g)
    if facts.replicas is None:
        ready = condition(
            "Ready",
            False,
            "NoDeployment",
            "the Deployment does not exist"
            + (": its apply was refused" if facts.apply_failure is not None else " yet"),
            g,
        )
    else:
        ok = facts.ready >= facts.replicas
        ready = condition(
            "Ready",
            ok,
            "AllReplicasReady" if ok else "ReplicasNotReady",
            f"{facts.ready} of {facts.replicas} replicas ready",
            g,
        )
    return [progressing, ready, degraded]
