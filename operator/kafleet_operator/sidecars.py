"""Reading a group's sidecars: each ready pod's ``/status``, as the operator's passes need it.

Owns: which pods count (ready and not terminating: an unready pod's figures are a start-up's,
a terminating one's a drain's), the URL of a pod's sidecar (an IPv6 address in brackets), and
asking them side by side with a short timeout, so one hung pod costs two seconds, not twenty
pods' worth. A sidecar that does not answer is left out, never guessed.

Does not own what the figures mean (``tuner.py``, ``autoscaler.py``) or the sidecar itself
(``kafleet.sidecar``).
"""

from __future__ import annotations

import concurrent.futures
import ipaddress
import json
import logging
import os
import urllib.request
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s

from kafleet_operator import builders
from kafleet_operator.kube import client

log = logging.getLogger("kafleet.operator")
# `kafleet operator --sidecar-url` sets this (before this module loads).
SIDECAR_URL = os.environ.get("KAFLEET_OPERATOR_SIDECAR_URL", "http://{pod_ip}:8080")
TIMEOUT_S = 2.0
PARALLEL = 8


@dataclass(frozen=True)
class Report:
    """One ready pod's sidecar answer: ``status`` is its ``/status`` JSON."""

    pod: str
    status: dict[str, Any]

    @property
    def worker(self) -> dict[str, Any]:
        """The worker's state as the sidecar last read it (empty before the first write)."""
        return dict(self.status.get("worker") or {})


def url(pod_ip: str, pod: str, template: str = "") -> str:
    """The sidecar's base URL for a pod; an IPv6 address is bracketed, as URLs need."""
    host = pod_ip
    try:
        if ipaddress.ip_address(pod_ip).version == 6:
            host = f"[{pod_ip}]"
    except ValueError:
        pass  # a name (a test's template may use one): as it is
    return (template or SIDECAR_URL).format(pod_ip=host, pod=pod)


def counted(pod: k8s.V1Pod) -> tuple[str, str] | None:
    """A pod's (address, name) if its figures count: it is Ready, has an address, and is not
    terminating; else None."""
    meta, status = pod.metadata, pod.status
    if meta is None or status is None or meta.deletion_timestamp is not None:
        return None
    ready = any(c.type == "Ready" and c.status == "True" for c in status.conditions or [])
    return (str(status.pod_ip), str(meta.name)) if ready and status.pod_ip else None


def _fetch(base: str, pod: str) -> Report | None:
    try:
        with urllib.request.urlopen(base + "/status", timeout=TIMEOUT_S) as answer:
            body = json.load(answer)
    except (OSError, ValueError) as exc:
        log.debug("sidecar of %s did not answer: %s", pod, exc)
        return None
    return Report(pod, body) if isinstance(body, dict) else None


def read(namespace: str, name: str) -> list[Report]:
    """The ``/status`` of every ready, running pod of the group that answers."""
    pods = k8s.CoreV1Api(client()).list_namespaced_pod(
        namespace, label_selector=builders.selector(name)
    )
    found = [counted(p) for p in pods.items]
    targets = [(url(ip, pod), pod) for ip, pod in filter(None, found)]
    if not targets:
        return []
    workers = min(PARALLEL, len(targets))
    with concurrent.futures.ThreadPoolExecutor(workers, "kafleet-sidecars") as pool:
        answers = pool.map(lambda t: _fetch(*t), targets)
        return [a for a in answers if a is not None]
