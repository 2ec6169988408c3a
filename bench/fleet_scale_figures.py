"""B9's figures of one scaler at one N: how they are taken and how they are summed up.

Owns: ``Measured`` (settling, a window at rest, the lag step, and the raw samples), waiting for
the objects to be Ready (``settle``), the window at rest (``measure``: the scaler's processes
every second, the broker's and the apiserver's request counters at both ends), watching the step
(``watch_step``: each group's decision and its Deployment reaching full scale, polled every half
second), and the rows of the table (``rows``, ``ratio``).

Does not own the workload (``b9_fleet_scale.py``) or the readers (``fleet_scale_probe.py``).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench import fleet_scale_probe as probe

TICK_S = 5.0  # both scalers' interval: figures "per tick" are per 5 s
FULL = 8  # a Deployment at full scale
POLL_S = 0.5
SETTLE_STALL_S = 180.0  # settling gives up when no object became Ready for this long


@dataclass
class Measured:
    """One scaler's figures at one N."""

    groups: int
    settle_s: float | None = None
    ready: int = 0
    window_s: float = 0.0
    cpu_s: float = 0.0  # over the window, all of the scaler's processes
    peak_rss_mib: float = 0.0
    threads: int = 0
    fds: int = 0
    connections: int = 0
    kafka_s: float = 0.0  # between the two reads of the broker's counters
    kafka: dict[str, int] = field(default_factory=dict)  # requests meanwhile, by type
    api_per_min: dict[str, float] = field(default_factory=dict)  # by "VERB resource"
    log_errors: int = 0  # from the window at rest to the step's end
    passes_per_group_min: float | None = None
    decision_s: list[float] = field(default_factory=list)
    full_s: list[float] = field(default_factory=list)
    samples: dict[str, list[dict[str, float]]] = field(default_factory=dict)


def ready(obj: dict[str, Any], also: str = "") -> bool:
    """Whether the object's Ready condition is True (and it has an ``also`` condition)."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    found = {c.get("type"): c.get("status") for c in conditions}
    return found.get("Ready") == "True" and (not also or also in found)


def settle(measured: Measured, started: float, count: Callable[[], int]) -> None:
    """Wait until ``count()`` (the Ready objects) reaches the groups, or stalls."""
    last, since = -1, time.monotonic()
    while True:
        measured.ready = count()
        if measured.ready >= measured.groups:
            measured.settle_s = time.monotonic() - started
            return
        if measured.ready != last:
            last, since = measured.ready, time.monotonic()
        elif time.monotonic() - since > SETTLE_STALL_S:
            return
        time.sleep(2)


def measure(
    measured: Measured,
    kubeconfig: Path,
    pids: dict[str, int],
    jmx: probe.BrokerJmx,
    broker_port: int,
    window_s: float,
    passes: Callable[[], float] | None = None,
) -> None:
    """The window at rest: the processes ``pids`` every second, the counters at both ends
    (``passes``: the scaler's passes over all groups so far, if it counts them)."""
    api_before, kafka_before = probe.apiserver_requests(kubeconfig), jmx.requests()
    passed = passes() if passes else 0.0
    sampler = probe.Sampler(list(pids.values()), broker_port)
    sampler.start()
    time.sleep(window_s)
    samples = sampler.stop()
    if passes:
        passed = passes() - passed
    kafka_after, api_after = jmx.requests(), probe.apiserver_requests(kubeconfig)
    first = samples[next(iter(pids.values()))]
    measured.window_s = first[-1].t - first[0].t
    if passes:
        measured.passes_per_group_min = passed / measured.groups / (measured.window_s / 60)
    measured.api_per_min = probe.api_rates(api_before, api_after)
    measured.kafka_s = kafka_after[0] - kafka_before[0]
    measured.kafka = dict((kafka_after[1] - kafka_before[1]).most_common())
    for name, pid in pids.items():
        runs = samples[pid]
        measured.samples[name] = [asdict(s) for s in runs]
        measured.cpu_s += runs[-1].cpu_s - runs[0].cpu_s
        measured.peak_rss_mib += max(s.peak_rss_mib for s in runs)
        measured.threads += max(s.threads for s in runs)
        measured.fds += max(s.fds for s in runs)
        measured.connections += max(s.connections for s in runs)


def watch_step(
    measured: Measured,
    started: float,
    names: list[str],
    read: Callable[[str], tuple[bool, int]],
    timeout_s: float,
) -> None:
    """Per group of ``names``, seconds from ``started`` until ``read`` says it decided, and
    until its Deployment has ``FULL`` replicas."""
    decided: dict[str, float] = {}
    full: dict[str, float] = {}
    while len(full) < len(names) and time.monotonic() - started < timeout_s:
        for name in names:
            if name in full:
                continue
            decision, replicas = read(name)
            now = time.monotonic() - started
            if decision:
                decided.setdefault(name, now)
            if replicas >= FULL:
                full[name] = now
        time.sleep(POLL_S)
    measured.decision_s, measured.full_s = sorted(decided.values()), sorted(full.values())


def percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank percentile (p99 of ten values is the largest)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -int(-q * len(ordered) // 1))
    return ordered[rank - 1]


def rows(measured: Measured, steps: int) -> dict[str, float | str | None]:
    """The table's figures for one scaler at one N, by label."""
    ticks, kafka, n = measured.window_s / TICK_S, Counter(measured.kafka), measured.groups
    kafka_ticks = measured.kafka_s / TICK_S
    timed = {
        f"step -> {what}, {label}": percentile(values, q)
        for what, values in (("decision s", measured.decision_s), ("8 replicas s", measured.full_s))
        for label, q in (("p50", 0.5), ("p99", 0.99), ("max", 1.0))
    }
    return {
        "settle s (apply -> all Ready)": measured.settle_s or f"{measured.ready}/{n} Ready",
        "CPU s per 5 s tick": measured.cpu_s / ticks,
        "CPU ms per group per tick": measured.cpu_s / ticks / n * 1000,
        "peak RSS MiB": measured.peak_rss_mib,
        "threads": measured.threads,
        "open fds": measured.fds,
        "broker connections": measured.connections,
        "Kafka requests per tick": sum(kafka.values()) / kafka_ticks,
        **{
            f"  {r} per tick": kafka[r] / kafka_ticks
            for r in ("ListOffsets", "Metadata", "OffsetFetch")
        },
        "apiserver writes/min": probe.writes(measured.api_per_min),
        "apiserver requests/min": sum(measured.api_per_min.values()),
        "passes per group per min": measured.passes_per_group_min,
        **timed,
        "errors logged at rest and in the step": measured.log_errors,
        f"decided / full, of {steps}": f"{len(measured.decision_s)} / {len(measured.full_s)}",
    }


def ratio(a: object, b: object) -> float | str:
    if isinstance(a, int | float) and isinstance(b, int | float) and b:
        return a / b
    return ""
