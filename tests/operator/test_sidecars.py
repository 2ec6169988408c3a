"""Which pods' sidecars the operator asks, and at which address: only ready pods that are not
terminating count, and an IPv6 address is bracketed (unbracketed, every request failed and
tuning was silently dead on IPv6 clusters)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import kopf
import pytest

from kafleet_operator.policy import builders
from kafleet_operator.reading import sidecars, watched


def pod(ip: str | None = "10.0.0.7", ready: bool = True, terminating: bool = False) -> kopf.Body:
    """A group's pod as the operator's watch of pods sees it."""
    meta: dict[str, Any] = {
        "name": "orders-abc",
        "namespace": "shop",
        "labels": builders.labels("orders"),
    }
    if terminating:
        meta["deletionTimestamp"] = "2026-11-26T07:00:00Z"
    status: dict[str, Any] = {
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]
    }
    if ip:
        status["podIP"] = ip
    return kopf.Body(cast(kopf.RawBody, {"metadata": meta, "status": status}))


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("10.0.0.7", "http://10.0.0.7:8080"),
        ("fd00::7", "http://[fd00::7]:8080"),
        ("2001:db8::1", "http://[2001:db8::1]:8080"),
    ],
)
def test_a_sidecar_url_brackets_an_ipv6_address(address: str, expected: str) -> None:
    assert sidecars.url(address, "p", "http://{pod_ip}:8080") == expected


def test_a_sidecar_url_template_may_name_the_pod() -> None:
    assert sidecars.url("10.0.0.7", "p-1", "http://{pod}.svc:8080") == "http://p-1.svc:8080"


def test_a_ready_running_pod_counts() -> None:
    assert asyncio.run(watched.pods(pod())) == {("shop", "orders"): ("10.0.0.7", "orders-abc")}


@pytest.mark.parametrize(
    "candidate",
    [pod(ready=False), pod(terminating=True), pod(ip=None)],
    ids=["unready", "terminating", "without-address"],
)
def test_unready_terminating_or_unaddressed_pods_do_not_count(candidate: kopf.Body) -> None:
    """Review of issue 22: ``None`` left a pod that went unready or began terminating in the
    index (kopf keeps the last entry), so its sidecar was still asked; an empty result
    takes it out."""
    assert asyncio.run(watched.pods(candidate)) == {}
