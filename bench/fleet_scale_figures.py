"""B9's figures of one scaler at one N: how they are taken and how they are summed up.

Owns: ``Measured`` (settling, a window at rest, the lag step, and the raw samples), waiting for
a count to reach the groups (``settle``: the objects Ready after the apply, or every group
passed by its leader after kafleet's operators start), the window at rest (``measure``: the
scaler's processes every second, summed and the largest, the broker's and the apiserver's
request counters at both ends), watching the step (``watch_step``: each group's decision and its
Deployment reaching full scale, polled every half second), the rows of the table (``rows``,
``ratio``), and the goals B9 holds kafleet to (``goals``).

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
    settle_s: float | None = None  # from the apply until all Ready (None: it stalled)
    ready: int = 0
    cold: bool = True  # the objects were applied for this scaler (else: only a restart)
    restart_s: float | None = None  # kafleet: from its operators' restart to every group passed
    passed: int = 0  # by its leader (restarted: whether that was measured)
    restarted: bool = False
    deleted_s: float | None = None  # kafleet: its namespace (the groups and all they own) deleted
    window_s: float = 0.0
    cpu_s: float = 0.0  # over the window, all of the scaler's processes
    peak_rss_mib: float = 0.0  # summed over the processes, as are threads, fds, connections
    threads: int = 0
    fds: int = 0
    connections: int = 0
    processes: int = 0
    max_rss_mib: float = 0.0  # the largest process's, as are the two below
    max_threads: int = 0
    max_connections: int = 0
    shards_led: list[int] = field(default_factory=list)  # by each process, at the window's end
    lease_writes_per_min: float | None = None  # kafleet's operators' own, seen by a watch
    lease_api_per_min: dict[str, float] = field(default_factory=dict)  # kwok's nodes' included
    kafka_s: float = 0.0  # between the two reads of the broker's counters
    kafka: dict[str, int] = field(default_factory=dict)  # requests meanwhile, by type
    api_per_min: dict[str, float] = field(default_factory=dict)  # by "VERB resource"
    log_errors: int = 0  # from the window at rest to the step's end
    passes_per_group_min: float | None = None
    stepped: int = 10  # groups the lag step hit
    decision_s: list[float] = field(default_factory=list)
    full_s: list[float] = field(default_factory=list)
    samples: dict[str, list[dict[str, float]]] = field(default_factory=dict)


def ready(obj: dict[str, Any], also: str = "") -> bool:
    """Whether the object's Ready condition is True (and it has an ``also`` condition)."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    found = {c.get("type"): c.get("status") for c in conditions}
    return found.get("Ready") == "True" and (not also or also in found)


def settle(
    groups: int, started: float, count: Callable[[], int], stall_s: float = SETTLE_STALL_S
) -> tuple[float | None, int]:
    """Wait until ``count()`` (the objects Ready, the groups passed) reaches ``groups``, or
    stays the same for ``stall_s``; the seconds since ``started`` (None if it stalled) and the
    last count. Polled every 2 s, every ``groups`` / 1,000 s past 2,000 (a list of 10,000 groups
    is not free)."""
    last, since = -1, time.monotonic()
    while True:
        found = count()
        if found >= groups:
            return time.monotonic() - started, found
        if found != last:
            last, since = found, time.monotonic()
        elif time.monotonic() - since > stall_s:
            return None, found
        time.sleep(max(2.0, groups / 1000))


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
    minutes = (api_after[0] - api_before[0]) / 60
    measured.lease_api_per_min = {
        key: round(count / minutes, 1)
        for key, count in (api_after[1] - api_before[1]).most_common()
        if key.endswith(" leases") and not key.startswith("WATCH")
    }
    measured.kafka_s = kafka_after[0] - kafka_before[0]
    measured.kafka = dict((kafka_after[1] - kafka_before[1]).most_common())
    measured.processes = len(pids)
    for name, pid in pids.items():
        runs = samples[pid]
        measured.samples[name] = [asdict(s) for s in runs]
        measured.cpu_s += runs[-1].cpu_s - runs[0].cpu_s
        rss, threads = max(s.peak_rss_mib for s in runs), max(s.threads for s in runs)
        connections = max(s.connections for s in runs)
        measured.peak_rss_mib += rss
        measured.threads += threads
        measured.fds += max(s.fds for s in runs)
        measured.connections += connections
        measured.max_rss_mib = max(measured.max_rss_mib, rss)
        measured.max_threads = max(measured.max_threads, threads)
        measured.max_connections = max(measured.max_connections, connections)


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


def rows(measured: Measured) -> dict[str, float | str | None]:
    """The table's figures for one scaler at one N, by label (None: not measured)."""
    m, kafka, n = measured, Counter(measured.kafka), measured.groups
    ticks, kafka_ticks = m.window_s / TICK_S, m.kafka_s / TICK_S
    timed = {
        f"step -> {what}, {label}": percentile(values, q)
        for what, values in (("decision s", m.decision_s), ("8 replicas s", m.full_s))
        for label, q in (("p50", 0.5), ("p99", 0.99), ("max", 1.0))
    }
    settled = m.settle_s or f"{m.ready}/{n} Ready"
    restarted = m.restart_s or f"{m.passed}/{n} passed"
    return {
        "settle s (apply -> all Ready)": settled if m.cold else None,
        "restart s (operators' start -> every group passed by its leader)": (
            restarted if m.restarted else None
        ),
        "groups deleted s (their namespace)": m.deleted_s,
        "processes": m.processes,
        "shards led by each process": ", ".join(map(str, m.shards_led)) or None,
        "CPU s per 5 s tick, all processes": m.cpu_s / ticks,
        "CPU ms per group per tick": m.cpu_s / ticks / n * 1000,
        "peak RSS MiB, all processes": m.peak_rss_mib,
        "peak RSS MiB, largest process": m.max_rss_mib or None,
        "threads, all processes": m.threads,
        "threads, largest process": m.max_threads or None,
        "open fds": m.fds,
        "broker connections, all processes": m.connections,
        "broker connections, most of a process": m.max_connections if m.max_rss_mib else None,
        "Kafka requests per tick": sum(kafka.values()) / kafka_ticks,
        **{
            f"  {r} per tick": kafka[r] / kafka_ticks
            for r in ("ListOffsets", "Metadata", "OffsetFetch", "FindCoordinator")
        },
        "apiserver writes/min at rest, Events left out": probe.writes(m.api_per_min),
        "Events posted/min at rest, any component's": probe.events(m.api_per_min),
        "apiserver requests/min at rest": sum(m.api_per_min.values()),
        "Lease writes/min, the operators' (watched)": m.lease_writes_per_min,
        "Lease requests/min, kwok's nodes' too": sum(m.lease_api_per_min.values()) or None,
        "passes per group per min": m.passes_per_group_min,
        **timed,
        "errors logged at rest and in the step": m.log_errors,
        "decided / full, of the groups stepped": (
            f"{len(m.decision_s)} / {len(m.full_s)} of {m.stepped}"
        ),
    }


# What kafleet is held to at 10,000 groups (the issue that asked for B9 at 10,000).
GOAL_FULL_P99_S, GOAL_CPU_S, GOAL_RSS_MIB = 10.0, 2.5, 2048.0


def goals(measured: Measured) -> str:
    """Each goal's figure and whether it is met: p99 of step -> 8 replicas, CPU per tick over
    all processes, the largest process's RSS, writes at rest, broker connections a process."""
    m = measured
    full = percentile(m.full_s, 0.99) if len(m.full_s) == m.stepped else None
    cpu, writes = m.cpu_s / (m.window_s / TICK_S), probe.writes(m.api_per_min)
    reached = "not all reached" if full is None else f"{full:.1f} s"
    found = [
        (f"p99 step -> 8 replicas {reached}", full is not None and full <= GOAL_FULL_P99_S),
        (f"CPU {cpu:.2f} s a tick", cpu <= GOAL_CPU_S),
        (f"RSS {m.max_rss_mib:,.0f} MiB a process", m.max_rss_mib <= GOAL_RSS_MIB),
        (f"{writes:g} writes/min at rest", writes == 0),
        (f"{m.max_connections} broker connection(s) a process", m.max_connections <= 1),
    ]
    return "; ".join(f"{what}: {'met' if ok else 'NOT met'}" for what, ok in found)


def ratio(a: object, b: object) -> float | str:
    if isinstance(a, int | float) and isinstance(b, int | float) and b:
        return a / b
    return ""
