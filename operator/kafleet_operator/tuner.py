"""One pass's tuning step: ``max_poll_records`` from the sidecars' figures.

Owns: the handlers' figures from the ready pods' sidecars (``sidecars.py``), the value in
force (``effective_max_poll_records``: the tuned one while tuning is on), and writing a tuned
value to the ConfigMap the workers watch, with an Event.

Does not own the policy (``tuning.py``) or the rest of a pass (``observer.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import kopf

from kafleet_operator import builders, sidecars, tuning
from kafleet_operator.kube import apply, post_event
from kafleet_operator.spec import ParsedSpec

log = logging.getLogger("kafleet.operator")


def effective_max_poll_records(parsed: ParsedSpec, status: Mapping[str, Any]) -> int:
    tuned = status.get("maxPollRecords")
    if parsed.fleet.tuning.enabled and isinstance(tuned, int):
        return tuned
    return parsed.worker.max_poll_records


def _sidecar_figures(namespace: str, name: str) -> tuple[float | None, int]:
    """Mean handler latency and concurrency over the ready pods' sidecars (their /status)."""
    latency_sum, count, concurrency = 0.0, 0, 0
    for report in sidecars.read(namespace, name):
        latency = report.worker.get("handler_latency") or {}
        latency_sum += float(latency.get("sum", 0.0))
        count += sum(latency.get("counts", []))
        concurrency = max(concurrency, int(report.worker.get("concurrency") or 0))
    return (latency_sum / count if count else None), concurrency


def tune(
    body: kopf.Body,
    parsed: ParsedSpec,
    status: Mapping[str, Any],
    patch: kopf.Patch,
    namespace: str,
    name: str,
) -> None:
    if not parsed.fleet.tuning.enabled:
        return
    latency, concurrency = _sidecar_figures(namespace, name)
    current = effective_max_poll_records(parsed, status)
    move = tuning.step(
        current,
        latency,
        concurrency or parsed.worker.concurrency,
        parsed.worker.drain_timeout_s,
        parsed.worker.queue.max_records,
        parsed.fleet.tuning,
    )
    if not move.changes:
        return
    owner = {
        "apiVersion": body["apiVersion"],
        "kind": body["kind"],
        "metadata": dict(body.metadata),
    }
    apply(builders.config_map(owner, parsed, move.max_poll_records))  # workers watch it
    patch.status["maxPollRecords"] = move.max_poll_records
    message = (
        f"max_poll_records {current} -> {move.max_poll_records}: handlers take "
        f"{(latency or 0) * 1000:.1f} ms at concurrency {concurrency}"
    )
    post_event(body, move.reason, message)
    log.info("%s/%s: %s", namespace, name, message)
