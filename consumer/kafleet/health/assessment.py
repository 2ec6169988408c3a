"""Is the worker alive and making progress? Is it ready? Pure judgements of its state file.

Owns: liveness (``/healthz``) and readiness (``/readyz``) as functions of the state the worker
last published, the time now, and the sidecar's settings. No I/O (the pid check is passed in),
so every case is tested without processes. The sidecar (``sidecar/server.py``) serves the answers.

Liveness fails (and Kubernetes restarts the pod) when the worker:
- has published nothing for ``startup_grace_s`` after the sidecar started;
- stopped, or its process is gone (when the sidecar can see it: a shared pid namespace);
- has not polled for ``poll_share`` of ``max_poll_interval_ms`` (it hangs, or is starved), the
  time its state file has been stale counting as time without a poll; in a share group, which
  has no poll interval (a member waits for its handlers between polls), a member's loop that
  has not turned for ``poll_share`` of the record lock;
- has had a record in its handler longer than ``processing_timeout_s`` (KIP-62: polling proves
  only that the process lives), its partition's or one no longer assigned (a revoke stopped
  waiting for it, and it still holds a thread);
- has a partition that fetches nothing although its fetch was restarted
  ``FETCH_RESTARTS_BEFORE_UNHEALTHY`` times (``engine/fetch_watch.py``, librdkafka#5586):
  a restart of the process is the cure that is left;
- hit a fatal error.
A worker that is slow but polls, and whose records finish within the timeout, stays live.

Readiness: the state is fresh, the worker is in the group (it has had an assignment, possibly
empty: an idle member of a group with more members than partitions is legitimately ready),
it is not stopping, its sink (Spark), if any, is writing, and every partition it lets flow
fetches: a sink outage makes the worker unready, not dead, since restarting it cannot bring
Spark back; a partition that stopped fetching (``stalled_partitions``: behind its log end, no
record for ``fetch_stall_timeout_ms``) makes it unready, named, while the worker restarts that
fetch itself, and unhealthy only once that did not help.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# A partition still stalled after this many restarts of its fetch fails liveness.
FETCH_RESTARTS_BEFORE_UNHEALTHY = 3


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reasons: list[str] = field(default_factory=list)

    def body(self) -> str:
        return ("ok" if self.ok else "failing") + "".join(f"\n- {r}" for r in self.reasons) + "\n"


def _at(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def liveness(
    state: dict[str, Any] | None,
    now: float,
    *,
    started_at: float,
    startup_grace_s: float = 60.0,
    poll_share: float = 0.5,
    pid_alive: Callable[[int], bool] | None = None,
) -> Verdict:
    """``pid_alive`` is given only when the sidecar shares the worker's pid namespace."""
    if state is None:
        waited = now - started_at
        if waited <= startup_grace_s:
            return Verdict(
                True,
                [
                    f"worker not started yet ({waited:.0f} s of a "
                    f"{startup_grace_s:g} s start-up grace)"
                ],
            )
        return Verdict(
            False,
            [
                f"the worker has published no state since the sidecar started "
                f"at {_at(started_at)} ({waited:.0f} s)"
            ],
        )
    reasons = []
    written = float(state.get("written_at", 0.0))
    age = max(0.0, now - written)
    if state.get("stopped"):
        reasons.append(f"the worker stopped at {_at(written)}")
    pid = state.get("pid")
    if pid_alive is not None and isinstance(pid, int) and not pid_alive(pid):
        reasons.append(f"the worker process {pid} is gone (its last state: {_at(written)})")
    since_poll = age + float(state.get("seconds_since_poll", 0.0))
    if state.get("group_type") == "share":
        # No poll interval in a share group: a member waits for its handlers between polls,
        # and only its records' locks bound that. Its loop turns every ~0.1 s meanwhile.
        limit = max(10.0, float(state.get("record_lock_ms", 30_000)) / 1000 * poll_share)
        if since_poll > limit:
            reasons.append(
                f"a share consumer's loop has not turned for {since_poll:.1f} s, since "
                f"{_at(now - since_poll)} (limit {limit:g} s: {poll_share:g} of its record lock)"
            )
    else:
        limit = float(state.get("max_poll_interval_ms", 300_000)) / 1000 * poll_share
        if since_poll > limit:
            reasons.append(
                f"no poll for {since_poll:.1f} s, since {_at(now - since_poll)} "
                f"(limit {limit:g} s: {poll_share:g} of max_poll_interval_ms)"
            )
    timeout = float(state.get("processing_timeout_s", 300.0))
    in_handlers = [
        (f"{name}: a record", float(part.get("oldest_in_flight_s", 0.0)))
        for name, part in sorted(state.get("partitions", {}).items())
    ]
    in_handlers.append(
        ("a record of a partition no longer assigned", float(state.get("oldest_abandoned_s", 0.0)))
    )
    if state.get("group_type") == "share":
        in_handlers.append(("a share record", float(state.get("oldest_in_flight_s", 0.0))))
    for what, oldest in in_handlers:
        if oldest > 0 and oldest + age > timeout:
            reasons.append(
                f"{what} has been in its handler for {oldest + age:.1f} s, since "
                f"{_at(now - oldest - age)} (processing_timeout_s {timeout:g})"
            )
    for name, stall in _stalls(state):
        restarts = int(stall.get("restarts", 0))
        if restarts >= FETCH_RESTARTS_BEFORE_UNHEALTHY:
            reasons.append(
                f"{_stalled(name, stall, now, age, state)}, although its fetch was restarted "
                f"{restarts} times: a restart of the worker is the cure left (librdkafka#5586)"
            )
    if state.get("fatal_error"):
        reasons.append(f"fatal error: {state['fatal_error']}")
    return Verdict(not reasons, reasons)


def _stalls(state: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return sorted((state.get("stalled_partitions") or {}).items())


def _stalled(
    name: str, stall: dict[str, Any], now: float, age: float, state: dict[str, Any]
) -> str:
    """How a partition that fetches nothing is described (its figures aged with the file)."""
    quiet = float(stall.get("quiet_s", 0.0)) + age
    return (
        f"{name} fetches nothing: {stall.get('lag')} records behind its log end and no record "
        f"for {quiet:.1f} s, since {_at(now - quiet)} (fetch_stall_timeout_ms "
        f"{state.get('fetch_stall_timeout_ms')})"
    )


def readiness(
    state: dict[str, Any] | None,
    now: float,
    *,
    stale_after_s: float = 10.0,
    pid_alive: Callable[[int], bool] | None = None,
) -> Verdict:
    if state is None:
        return Verdict(False, ["the worker has not started"])
    written = float(state.get("written_at", 0.0))
    reasons = []
    pid = state.get("pid")
    if state.get("stopped"):
        reasons.append(f"the worker stopped at {_at(written)}")
    elif pid_alive is not None and isinstance(pid, int) and not pid_alive(pid):
        reasons.append(f"the worker process {pid} is gone")
    elif now - written > stale_after_s:
        reasons.append(
            f"the worker's state is {now - written:.1f} s old (stale after {stale_after_s:g} s)"
        )
    elif not state.get("joined"):
        reasons.append(
            "the worker is not in its group: not joined yet, or it lost its partitions "
            "(cut off from the coordinator for a session) and is joining again"
        )
    age = max(0.0, now - written)
    for name, stall in _stalls(state):
        restarts = int(stall.get("restarts", 0))
        reasons.append(
            f"{_stalled(name, stall, now, age, state)}; its fetch restarted {restarts} "
            f"time{'s' * (restarts != 1)} (librdkafka#5586)"
        )
    sink = state.get("sink") or {}
    if sink.get("failing_since"):
        reasons.append(
            f"the sink ({sink.get('where')}) has failed every write since "
            f"{_at(float(sink['failing_since']))}: {sink.get('last_error')}; retrying, "
            "nothing committed past what it wrote"
        )
    return Verdict(
        not reasons,
        reasons or [f"in the group, {len(state.get('assigned', []))} partitions assigned"],
    )
