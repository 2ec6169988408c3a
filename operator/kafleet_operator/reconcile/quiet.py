"""A group at rest: a pass whose inputs are the last one's, when that one found nothing to do.

Owns: what a pass takes in (``Inputs``: the ConsumerGroup's and its Deployment's
resourceVersions, the ready pods, and each partition's log end, every one committed at it),
whether a pass may stop there (``unchanged``: the last full pass found the group at rest, its
inputs are the same, and it is less than ``MAX_S`` old), and recording a full pass's verdict
(``after``). Most of a fleet is at rest most of the time; a pass at rest costs the time of
this comparison, not of a pass.

Why a pass with the same inputs would do nothing: its spec, pause annotations and status are
the ConsumerGroup's (same resourceVersion), the Deployment's replicas and readiness the same;
with every partition committed at its log end, the lag and the time lag are 0; the log ends
have not moved since the last full pass, and that pass found no input over the rates' window
(so no replicas are held for the input); and it wished the replicas the group has (a wish equal
to the count is ``Steady`` whatever the windows hold, so time alone changes nothing); the tuner
had nothing on its way to the pods (a change awaiting its pods is timed); no drift was being
confirmed; the status already said what the pass found. Only consumer groups (a share group's
lag is the broker's, not offsets compared here). A full pass runs at least every ``MAX_S``
all the same.

Does not own the pass (``observer.py``), what a pass at rest leaves in the autoscaler's memory
(``autoscaler.at_rest``) or the verdicts it is built from (the autoscaler's, the tuner's and the
drift check's, in the group's memo: ``SCALING``, ``TUNING``, ``LEVEL``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kafleet_operator.reading import snapshots, watched
from kafleet_operator.reconcile.periodic import KAFKA

MAX_S = 60.0  # a group at rest still has a full pass this often
KEY = "at_rest"  # the memo's: (Inputs, when the pass that found the group at rest ran)
# The autoscaler's verdict of the last pass: True (nothing moves by time), False, or UNSCALED
# (no autoscaling now: each pass restarts its scale-down window, as a pass at rest does too).
SCALING, UNSCALED = "scaling_at_rest", "unscaled"
# The tuner's, of its last measure: the ready pods then, if nothing was on its way to them and
# no handler ran (None otherwise): a pod that came since has not been measured.
TUNING = "tuning_at_rest"
LEVEL = "level_at_rest"  # the drift check's, of the last pass: the Deployment as the spec says


@dataclass(frozen=True)
class Inputs:
    """What a pass of a group at rest reads."""

    group: str  # the ConsumerGroup's resourceVersion
    deployment: str  # its Deployment's
    pods: tuple[tuple[str, str], ...]  # the ready pods (address, name)
    ends: tuple[tuple[snapshots.TP, int], ...]  # each partition's log end, committed there


def inputs(body: Mapping[str, Any], memo: Mapping[str, Any]) -> Inputs | None:
    """This pass's inputs, or None where the group is not at rest by them: its lag unread,
    a partition not committed at its log end, a share group, no Deployment."""
    snapshot, want = memo.get(KAFKA, (None, None))
    if not isinstance(snapshot, snapshots.Snapshot) or want is None or want.share:
        return None
    committed = snapshot.committed.get(want.group_id)
    if not isinstance(committed, dict):
        return None
    tps, missing = snapshot.partitions(want)
    if missing or not tps:
        return None
    ends = snapshot.ends
    for tp in tps:
        if tp not in ends or committed.get(tp) != ends[tp]:
            return None
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    deployment = watched.deployment(namespace, name)
    if deployment is None:
        return None
    return Inputs(
        str(meta.get("resourceVersion")),
        str(deployment["metadata"].get("resourceVersion")),
        tuple(watched.ready_pods(namespace, name)),
        tuple((tp, ends[tp]) for tp in tps),
    )


def unchanged(memo: dict[str, Any], now: Inputs | None) -> bool:
    """Whether this pass may stop here: the last full pass found the group at rest, less than
    ``MAX_S`` ago, with these inputs. The snapshot is taken (the pass would have taken it)."""
    rest = memo.get(KEY)
    if now is None or rest is None or time.monotonic() - rest[1] >= MAX_S or rest[0] != now:
        return False
    memo.pop(KAFKA, None)
    return True


def after(memo: dict[str, Any], taken: Inputs | None, settled: bool) -> None:
    """A full pass's verdict: at rest if it ``settled`` (it wrote and left nothing) on
    ``taken``, the autoscaler and the tuner found nothing that moves by time (the tuner, with
    these pods) and no drift was found."""
    if (
        taken is not None
        and settled
        and memo.get(SCALING)
        and memo.get(TUNING) == taken.pods
        and memo.get(LEVEL)
    ):
        memo[KEY] = (taken, time.monotonic())
    else:
        memo.pop(KEY, None)
