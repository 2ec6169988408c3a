"""Pausing a ConsumerGroup by annotation, as KEDA and Strimzi users expect.

Owns: reading the two annotations into a ``Pause`` and what each means.

- ``kafleet.io/paused-replicas: "N"`` (KEDA's ``autoscaling.keda.sh/paused-replicas``): the
  Deployment is held at N replicas and autoscaling stops (the pass does not scale); ``spec.
  replicas`` keeps its value and rules again when the annotation goes.
- ``kafleet.io/pause-reconciliation: "true"`` (Strimzi's ``strimzi.io/pause-reconciliation``):
  nothing is applied: no reconcile, no object put back, no scaling, no tuning. The status is
  still written. ``"false"`` or no annotation resumes, and the next reconcile applies the
  spec as it is then.

An annotation whose value cannot be read pauses nothing and is reported (``problem``). No I/O.

kopf leaves every annotation under its own storage prefix (``kafleet.io/``, see handlers.py's
settings) out of the diff that fires update handlers, even one registered as a field; so
the handler ``pause_changed`` watches every event of a group, and ``applying.pause_changed``
compares its pause with the last one seen.

Does not own the conditions that report a pause (``conditions.py``) or acting on it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kafleet_operator.policy.spec import ParsedSpec

# A pause change the handler could not apply (an API server's blip), by group uid: the
# periodic pass calls this with its body and patch (a group at rest has no other event).
UNAPPLIED: dict[str, Callable[[Any, Any], None]] = {}
PAUSED_REPLICAS = "kafleet.io/paused-replicas"
PAUSE_RECONCILIATION = "kafleet.io/pause-reconciliation"


@dataclass(frozen=True)
class Pause:
    """What a group's annotations pause."""

    replicas: int | None = None  # the Deployment is held at this count; None: not held
    reconciliation: bool = False  # nothing is applied
    problem: str | None = None  # an annotation that could not be read, and why

    @property
    def scaling(self) -> bool:
        """Whether autoscaling stops (held replicas, or nothing applied at all)."""
        return self.replicas is not None or self.reconciliation

    def deployment_replicas(self, spec_replicas: int) -> int:
        """The Deployment's replicas: the held count while paused, else ``spec.replicas``."""
        return spec_replicas if self.replicas is None else self.replicas


def read(metadata: Mapping[str, Any]) -> Pause:
    annotations = metadata.get("annotations") or {}
    problems = []
    replicas: int | None = None
    raw = annotations.get(PAUSED_REPLICAS)
    if raw is not None:
        try:
            replicas = int(str(raw).strip())
        except ValueError:
            replicas = None
        if replicas is None or replicas < 0:
            replicas = None
            problems.append(f"{PAUSED_REPLICAS}: {raw!r} is not a whole number of 0 or more")
    flag = annotations.get(PAUSE_RECONCILIATION)
    reconciliation = False
    if flag is not None:
        value = str(flag).strip().lower()
        if value not in ("true", "false"):
            problems.append(f"{PAUSE_RECONCILIATION}: {flag!r} is neither 'true' nor 'false'")
        reconciliation = value == "true"
    return Pause(replicas, reconciliation, "; ".join(problems) or None)


def without_autoscaling(parsed: ParsedSpec) -> ParsedSpec:
    """The spec as the pass's autoscaling step sees it while paused: no policy, so it reads
    and reports the lag and never scales (nor falls back)."""
    fleet = parsed.fleet.model_copy(update={"autoscaling": None})
    return dataclasses.replace(parsed, fleet=fleet)
