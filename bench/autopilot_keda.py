"""B8's runs on real KEDA: KEDA v2.21 and the HPA of kube-controller-manager scaling B8's
ConsumerGroup through its scale subresource, where ``keda_hpa.py`` only models them.

Owns: the ScaledObject (``scaleTargetRef`` the ConsumerGroup, ``kafleet.io/v1alpha1``; the
``kafka`` trigger on the group's topic and group id with the model's ``Settings``: lagThreshold,
offsetResetPolicy, min and max replicas, the pollingInterval, and the scale-down window as
``advanced.horizontalPodAutoscalerConfig.behavior.scaleDown.stabilizationWindowSeconds``);
``scaling``, which starts KEDA on the fleet bed's control plane for one run, waits until the
HPA reads the metric, and deletes the ScaledObject before KEDA stops (its finalizer); and the
HPA's syncs (``HpaSyncs``), seen as the metrics adapter's ``GetMetrics`` calls on KEDA's
operator (one per HPA sync of the one ScaledObject), which place the trace's start so the
burst begins a chosen time before a sync, as the model's run places its syncs.

Does not own KEDA's processes (``tests/infra/keda.py``), the trace, the workers, the sampling or
the figures (``b8_autopilot.py``, ``autopilot_trace.py``), nor the HPA's sync period: that is
kube-controller-manager's default (15 s) in the test bed.
"""

from __future__ import annotations

import json
import math
import re
import statistics
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import fleet_bed, keda_hpa
from tests.infra import k8s
from tests.infra import keda as keda_infra

VERSION = keda_infra.KEDA_VERSION
READY_TIMEOUT_S = 120.0  # ScaledObject applied -> its HPA reading the metric, two syncs seen
SYNC_S = 15.0  # kube-controller-manager's --horizontal-pod-autoscaler-sync-period default
GET_METRICS = re.compile(
    r'^keda_internal_metricsservice_grpc_server_started_total\{[^}]*grpc_method="GetMetrics"'
    r"[^}]*\} (\S+)$",
    re.M,
)


def built() -> bool:
    return keda_infra.built() is not None


def scaled_object(name: str, topic: str, bootstrap: str, settings: keda_hpa.Settings) -> Any:
    """The ScaledObject a user would write for this ConsumerGroup (the group id is its name)."""
    behavior = {"scaleDown": {"stabilizationWindowSeconds": int(settings.down_window_s)}}
    reset = "latest" if settings.offset_reset_latest else "earliest"
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": name},
        "spec": {
            "scaleTargetRef": {
                "apiVersion": "kafleet.io/v1alpha1",
                "kind": "ConsumerGroup",
                "name": name,
            },
            "pollingInterval": int(settings.polling_interval_s),
            "minReplicaCount": settings.min_replicas,
            "maxReplicaCount": settings.max_replicas,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": behavior}},
            "triggers": [
                {
                    "type": "kafka",
                    "metadata": {
                        "bootstrapServers": bootstrap,
                        "consumerGroup": name,
                        "topic": topic,
                        "lagThreshold": str(settings.lag_threshold),
                        "offsetResetPolicy": reset,
                        "allowIdleConsumers": str(settings.allow_idle_consumers).lower(),
                    },
                }
            ],
        },
    }


class HpaSyncs(threading.Thread):
    """When the HPA read KEDA's metric: the moments (``time.monotonic()``, to ``every_s``) at
    which the count of the adapter's ``GetMetrics`` calls on KEDA's operator went up."""

    def __init__(self, metrics_address: str, every_s: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.url = f"http://{metrics_address}/metrics"
        self.every_s = every_s
        self.times: list[float] = []
        self.errors = 0
        self._done = threading.Event()

    def _count(self) -> float:
        with urllib.request.urlopen(self.url, timeout=2) as response:
            text = response.read().decode()
        return sum(float(value) for value in GET_METRICS.findall(text))

    def run(self) -> None:
        last: float | None = None
        while not self._done.wait(self.every_s):
            try:
                count = self._count()
            except OSError:
                self.errors += 1
                continue
            if last is not None and count > last:
                self.times.append(time.monotonic())
            last = count

    def stop(self) -> None:
        self._done.set()
        self.join(5)

    def period(self) -> float:
        """The HPA's sync period as seen (its resync comes ``SYNC_S`` after a sync ends)."""
        gaps = [b - a for a, b in zip(self.times, self.times[1:], strict=False)]
        near = [g for g in gaps if 0.8 * SYNC_S < g < 1.3 * SYNC_S]
        return statistics.median(near) if near else SYNC_S

    def start_for(self, lead_s: float, before_sync_s: float, margin_s: float = 1.0) -> float:
        """Sleep until the moment to start a trace whose burst begins ``lead_s`` after its
        start, so that the burst begins ``before_sync_s`` before an HPA sync; that moment."""
        if not self.times:
            raise RuntimeError("no HPA sync seen yet")
        last, period = self.times[-1], self.period()
        earliest = time.monotonic() + margin_s + lead_s + before_sync_s
        sync = last + max(0, math.ceil((earliest - last) / period)) * period
        started = sync - lead_s - before_sync_s
        time.sleep(max(0.0, started - time.monotonic()))
        return started

    def first_after(self, moment: float) -> float | None:
        """Seconds from ``moment`` to the first sync seen after it."""
        return next((t - moment for t in self.times if t >= moment), None)


def _get(bed: fleet_bed.Bed, kind: str, name: str) -> Any:
    """The object as JSON, or {} when it is not there (yet)."""
    found = k8s.kubectl(bed.kubeconfig, "get", kind, name, "-n", bed.namespace, "-o", "json",
                        check=False)  # fmt: skip
    return json.loads(found) if found.strip() else {}


def _conditions(found: Any) -> dict[str, str]:
    return {c["type"]: c["status"] for c in (found.get("status") or {}).get("conditions") or []}


@dataclass
class RealKeda:
    """One run's KEDA: its processes, the HPA's syncs, and where its logs stood when the
    ScaledObject was ready (``errors`` counts what they logged since)."""

    keda: keda_infra.Keda
    syncs: HpaSyncs
    logged: dict[Path, int]

    def errors(self) -> int:
        """Error lines KEDA logged since the ScaledObject was ready."""
        count = 0
        for path, offset in self.logged.items():
            with path.open("rb") as log:
                log.seek(offset)
                count += log.read().decode(errors="replace").count('"level":"error"')
        return count


@contextmanager
def scaling(
    bed: fleet_bed.Bed, name: str, topic: str, bootstrap: str, settings: keda_hpa.Settings
) -> Iterator[RealKeda]:
    """KEDA started on ``bed``'s control plane and a ScaledObject for the ConsumerGroup
    ``name`` (``bootstrap``: the broker as this machine reaches it, where KEDA runs), yielded
    once it is Ready, its HPA's ScalingActive is True and two syncs were seen; on exit the
    ScaledObject is deleted (while KEDA runs: its finalizer) and KEDA stopped."""
    hpa_name = f"keda-hpa-{name}"
    with keda_infra.start_keda(bed.plane) as keda:
        syncs = HpaSyncs(keda.metrics_address)
        syncs.start()
        try:
            bed.apply(scaled_object(name, topic, bootstrap, settings))
            deadline = time.monotonic() + READY_TIMEOUT_S
            while not (
                _conditions(_get(bed, "scaledobject", name)).get("Ready") == "True"
                and _conditions(_get(bed, "hpa", hpa_name)).get("ScalingActive") == "True"
                and len(syncs.times) >= 2
            ):
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"KEDA's HPA for {name} did not read the metric twice within "
                        f"{READY_TIMEOUT_S:g} s ({len(syncs.times)} GetMetrics calls seen)\n"
                        f"ScaledObject: {_get(bed, 'scaledobject', name).get('status')}\n"
                        f"HPA: {_get(bed, 'hpa', hpa_name).get('status')}\n"
                        f"KEDA's logs: {', '.join(map(str, keda.logs.values()))}"
                    )
                time.sleep(1)
            logged = {path: path.stat().st_size for path in keda.logs.values() if path.exists()}
            yield RealKeda(keda, syncs, logged)
        finally:
            syncs.stop()
            k8s.kubectl(bed.kubeconfig, "delete", "scaledobject", name, "-n", bed.namespace,
                        "--timeout=120s", check=False, timeout=150)  # fmt: skip
