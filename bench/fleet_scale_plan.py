"""B9's plan: which fleet sizes, how many groups share a topic, which kafleet configurations,
whether KEDA runs beside them, how long the window at rest is, how many groups the lag step hits.

Owns reading them from the environment, each with a default that keeps B9 as it was (100, 300
and 1,000 groups, a topic each, one operator, KEDA) and grows with the size (from 3,000 groups:
ten groups a topic, one operator then 2 and 4 shards, KEDA up to 3,000), and an error that names
the variable. Does not own the workload or any measurement (``b9_fleet_scale.py``).

    KAFLEET_B9_SIZES=3000,10000    the sizes (--quick: 20)
    KAFLEET_B9_PER_TOPIC=10        groups a topic (default: 1 below 3,000 groups, 10 from there)
    KAFLEET_B9_SHARDS=0,2,4        kafleet's configurations: 0 is one operator without Leases,
                                   S is S processes of ``--shards S`` (default: 0 below 3,000,
                                   0,2,4 from there)
    KAFLEET_B9_KEDA=3000           KEDA at the sizes up to this (0: never)
    KAFLEET_B9_WINDOW_S=60         the window at rest (--quick: 30)
    KAFLEET_B9_STEP_GROUPS=10      at least this many groups in the lag step (whole topics)
    KAFLEET_B9_RESTART_S=900       also restart each configuration's operators after its step
                                   and time them until every group is passed again, waiting
                                   up to this long for any progress (default 0: no restart)
"""

from __future__ import annotations

import os
from dataclasses import dataclass

SIZES, QUICK_SIZES = (100, 300, 1000), (20,)
SHARED_FROM = 3000  # from this size on, topics are shared and shards measured by default
SHARED_PER_TOPIC, SHARDED = 10, (0, 2, 4)
KEDA_UP_TO = 3000  # KEDA's memory grew 3 MiB per ScaledObject at 1,000: 10,000 needs ~30 GiB


class PlanError(ValueError):
    """A variable of the plan that does not parse; the message names it."""


@dataclass(frozen=True)
class Plan:
    sizes: tuple[int, ...] = SIZES
    per_topic: int = 0  # groups a topic; 0: by size (1, or SHARED_PER_TOPIC from SHARED_FROM)
    shards: tuple[int, ...] = ()  # kafleet's configurations; (): by size
    keda_up_to: int = KEDA_UP_TO  # KEDA at sizes up to this; 0: never
    window_s: float = 60.0  # the window at rest
    step_groups: int = 10  # the lag step hits whole topics, at least this many groups
    restart_s: float = 0.0  # restart kafleet's operators after the step, and wait this long

    def __post_init__(self) -> None:
        if not self.sizes or min(self.sizes) < 1:
            raise PlanError(f"KAFLEET_B9_SIZES: sizes of 1 group or more, not {self.sizes}")
        if self.per_topic < 0:
            raise PlanError(f"KAFLEET_B9_PER_TOPIC: 1 or more, not {self.per_topic}")
        if any(s < 0 for s in self.shards) or len(set(self.shards)) < len(self.shards):
            raise PlanError(f"KAFLEET_B9_SHARDS: 0 and more, each once, not {self.shards}")
        if self.window_s < 10 or self.step_groups < 1:
            raise PlanError("KAFLEET_B9_WINDOW_S: 10 s or more; KAFLEET_B9_STEP_GROUPS: 1 or more")

    def groups_per_topic(self, n: int) -> int:
        return self.per_topic or (SHARED_PER_TOPIC if n >= SHARED_FROM else 1)

    def configurations(self, n: int) -> tuple[int, ...]:
        return self.shards or (SHARDED if n >= SHARED_FROM else (0,))

    def keda(self, n: int) -> bool:
        return n <= self.keda_up_to

    @classmethod
    def from_env(cls, quick: bool) -> Plan:
        return cls(
            sizes=_ints("KAFLEET_B9_SIZES") or (QUICK_SIZES if quick else SIZES),
            per_topic=int(_number("KAFLEET_B9_PER_TOPIC", 0)),
            shards=_ints("KAFLEET_B9_SHARDS"),
            keda_up_to=int(_number("KAFLEET_B9_KEDA", KEDA_UP_TO)),
            window_s=_number("KAFLEET_B9_WINDOW_S", 30.0 if quick else 60.0),
            step_groups=int(_number("KAFLEET_B9_STEP_GROUPS", 10)),
            restart_s=_number("KAFLEET_B9_RESTART_S", 0.0),
        )

    def describe(self) -> str:
        per_topic = self.per_topic or f"1 (from {SHARED_FROM:,}: {SHARED_PER_TOPIC})"
        shards = ",".join(map(str, self.shards)) or f"0 (from {SHARED_FROM:,}: 0,2,4)"
        return (
            f"sizes {','.join(map(str, self.sizes))}; groups a topic {per_topic}; "
            f"shards {shards}; KEDA up to {self.keda_up_to:,} groups; window "
            f"{self.window_s:g} s; step at least {self.step_groups} groups; restart "
            + (f"timed, up to {self.restart_s:g} s without progress" if self.restart_s else "no")
        )


def label(shards: int) -> str:
    """A kafleet configuration's name in the samples and the table."""
    return "kafleet" if shards == 0 else f"kafleet {shards} shard{'s' if shards > 1 else ''}"


def _ints(name: str) -> tuple[int, ...]:
    text = os.environ.get(name, "").strip()
    try:
        return tuple(int(x) for x in text.replace(" ", "").split(",") if x)
    except ValueError:
        raise PlanError(f"{name}: whole numbers separated by commas, not {text!r}") from None


def _number(name: str, default: float) -> float:
    text = os.environ.get(name, "").strip()
    try:
        return float(text) if text else default
    except ValueError:
        raise PlanError(f"{name}: a number, not {text!r}") from None
