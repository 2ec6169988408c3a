"""Which pods' sidecars the operator asks, and at which address: only ready pods that are not
terminating count, and an IPv6 address is bracketed (unbracketed, every request failed and
tuning was silently dead on IPv6 clusters)."""

from __future__ import annotations

import datetime

import pytest
from kubernetes import client as k8s

from kafleet_operator import sidecars


def pod(ip: str | None = "10.0.0.7", ready: bool = True, terminating: bool = False) -> k8s.V1Pod:
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(
            name="orders-abc",
            deletion_timestamp=datetime.datetime.now(datetime.UTC) if terminating else None,
        ),
        status=k8s.V1PodStatus(
            pod_ip=ip,
            conditions=[k8s.V1PodCondition(type="Ready", status="True" if ready else "False")],
        ),
    )


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
    assert sidecars.counted(pod()) == ("10.0.0.7", "orders-abc")


@pytest.mark.parametrize(
    "candidate",
    [pod(ready=False), pod(terminating=True), pod(ip=None)],
    ids=["unready", "terminating", "without-address"],
)
def test_unready_terminating_or_unaddressed_pods_do_not_count(candidate: k8s.V1Pod) -> None:
    assert sidecars.counted(candidate) is None
