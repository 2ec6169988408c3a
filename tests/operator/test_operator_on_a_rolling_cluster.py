"""The whole operator on three brokers while one dies and comes back: a real ``kafleet
operator`` process (kopf, its reading process, its periodic pass) on a real kube-apiserver
(kwok's pods: no worker runs, so nothing consumes), and a ConsumerGroup on the three-broker
cluster with a lag of 1,000 over 6 partitions, the issue's scenario. The broker that leads 2 of
the 6 partitions (not the group's coordinator) is SIGKILLed for 30 s, then started again and
given its leaderships back.

Proven from the outside, sampled every half second from the API server and the operator's
``/metrics``: the group's status says the lag cannot be read (``Degraded`` True,
``LagUnreadable``, naming a partition the dead broker led) within a pass and a read of the
kill; no smaller figure is ever shown (the status keeps the last exact lag, the lag gauge is
withdrawn) and the replicas are never moved (a partial reading, about 667, would scale 5 down
to 4 at once: the policy has no scale-down window); the exact lag and ``Degraded`` False are
back within a pass and a read of the reading becoming possible (the controller moved the dead
broker's leaderships to the live two, about 10 s after the kill, the broker still dead), and
stay through the broker's return and the move of its leaderships back to it; the operator
process never dies and no pass fails.

The reader and the policy alone on the same cluster: ``test_lag_on_a_rolling_cluster.py``;
without a cluster: ``test_unknown_lag_holds_the_fleet.py``.

Runs in the real node's session (``SIDE_TESTS``), which has the control plane, and starts its
own three brokers there: the three-broker session starts before the control plane's binaries
are built."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiException, AppsV1Api, CustomObjectsApi
from prometheus_client.parser import text_string_to_metric_families

from kafleet_operator.policy.crd import GROUP, PLURAL, VERSION
from kafleet_operator.reading import clusters
from tests.conftest import K8s
from tests.infra.kafka_cluster import KafkaCluster
from tests.infra.waiting import wait_until
from tests.operator.conftest import LaggingGroup, Operator, apply, consumer_group
from tests.operator.test_lag_on_a_rolling_cluster import (
    MOVE_S,
    PASS_S,
    Watch,
    elect_preferred_leaders,
)

NAME = "rolling"
# The group: 1,000 records over 6 partitions, committed at 0, that nothing consumes.
RECORDS = (167, 167, 167, 167, 166, 166)
LAG = sum(RECORDS)
# 1,000 / 200: 5 replicas; a partial reading (the 4 partitions that answered, about 667)
# would wish 4, and scale down at once (no window).
AUTOSCALING = {"lag_per_replica": 200, "max_replicas": 10, "scale_down_stabilization_s": 0}
REPLICAS = 5
DEAD_S = 30.0  # how long the broker stays dead, as in the issue
INTERVAL_S = 1.0  # the test operator's --interval-s (tests/operator/conftest.py)
SAMPLE_S = 0.5
# From the kill to Degraded, and from the reading becoming possible to the exact lag in the
# status: the read in flight then (a dead leader costs it one call's try, within the read's
# TIMEOUT_S), and one pass at the operator's default interval (the status written in it).
WITHIN_S = clusters.TIMEOUT_S + PASS_S


@dataclass(frozen=True)
class Sample:
    """The group as the API server and the operator's ``/metrics`` show it at ``at``."""

    at: float
    degraded: dict[str, Any]
    lag: int | None  # status.lag
    spec_replicas: int | None  # the ConsumerGroup's spec.replicas, which the autoscaler writes
    deployment_replicas: int | None
    lag_gauge: float | None  # kafleet_operator_lag_records (absent while unreadable)
    failures: float | None  # kafleet_operator_lag_read_failures_total
    scales: tuple[float | None, float | None]  # scale_events_total up, down
    errors: float | None  # passes_total{result="error"}

    @property
    def exact(self) -> bool:
        """The exact lag, and Degraded False: the group as it is when every partition reads."""
        return self.degraded.get("status") == "False" and self.lag == LAG and self.lag_gauge == LAG

    def line(self, since: float) -> str:
        d = self.degraded
        return (
            f"{self.at - since:7.1f} s: Degraded {d.get('status')} {d.get('reason')}, "
            f"status.lag {self.lag}, gauge {self.lag_gauge}, replicas {self.spec_replicas}/"
            f"{self.deployment_replicas}, failed reads {self.failures}, scales {self.scales}"
        )


class Sampler:
    """Samples the group every ``SAMPLE_S`` in a thread of its own, until ``stop``."""

    def __init__(self, k8s: K8s, namespace: str, op: Operator, group: LaggingGroup) -> None:
        self.custom, self.apps = CustomObjectsApi(k8s.api), AppsV1Api(k8s.api)
        self.namespace, self.op = namespace, op
        self.labels = {"namespace": namespace, "consumergroup": NAME, "group": group.group}
        self.samples: list[Sample] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def sample(self) -> Sample:
        body = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, NAME
        )
        status = body.get("status") or {}
        degraded = next((c for c in status.get("conditions") or [] if c["type"] == "Degraded"), {})
        try:
            deployment = self.apps.read_namespaced_deployment(NAME, self.namespace)
            deployed = deployment.spec.replicas
        except ApiException as exc:
            if exc.status != 404:
                raise
            deployed = None

        url = f"http://127.0.0.1:{self.op.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            families = list(text_string_to_metric_families(response.read().decode()))

        def metric(name: str, **extra: str) -> float | None:
            labels = {**self.labels, **extra}
            found = (
                sample.value
                for family in families
                for sample in family.samples
                if sample.name == name and sample.labels == labels
            )
            return next((float(value) for value in found), None)

        return Sample(
            time.monotonic(),
            dict(degraded),
            status.get("lag"),
            (body.get("spec") or {}).get("replicas"),
            deployed,
            metric("kafleet_operator_lag_records"),
            metric("kafleet_operator_lag_read_failures_total"),
            (
                metric("kafleet_operator_scale_events_total", direction="up"),
                metric("kafleet_operator_scale_events_total", direction="down"),
            ),
            metric("kafleet_operator_passes_total", result="error"),
        )

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.samples.append(self.sample())
            except Exception as exc:  # noqa: BLE001 - kept for the report: the test fails on it
                self.errors.append(f"{time.monotonic():.1f}: {exc!r}")
            self._stop.wait(max(0.0, started + SAMPLE_S - time.monotonic()))

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def first(self, since: float, done: Callable[[Sample], bool]) -> Sample | None:
        return next((s for s in list(self.samples) if s.at >= since and done(s)), None)


@pytest.fixture
def sampled() -> Iterator[list[Sampler]]:
    """The test's samplers, stopped after it."""
    started: list[Sampler] = []
    yield started
    for sampler in started:
        sampler.stop()


def serving(op: Operator) -> bool:
    try:
        op.metric("kafleet_operator_build_info")
    except OSError:  # not listening yet
        return False
    return True


def operator_log(op: Operator, lines: int = 40) -> str:
    text = Path(op.log).read_text(errors="replace").splitlines()
    return f"--- {op.log} (last {lines} lines) ---\n" + "\n".join(text[-lines:])


@pytest.mark.timeout(900)  # two JVMs' worth of a fault and its recovery, on a busy machine
def test_a_dead_leader_holds_the_fleet_and_says_why_until_the_operator_reads_the_exact_lag(
    k8s: K8s,
    namespace: str,
    cluster_intact: KafkaCluster,
    lagging_group: Callable[..., LaggingGroup],
    operator: Callable[..., Operator],
    sampled: list[Sampler],
) -> None:
    """The issue: the broker leading 2 of 6 partitions SIGKILLed for 30 s; the operator read
    677 of 1,000, said ``Degraded False Observed`` and scaled on it."""
    group = lagging_group(len(RECORDS), RECORDS, [0] * len(RECORDS))
    assert group.lag == LAG == 1000
    watch = Watch(cluster_intact, group)
    coordinator = watch.coordinator()
    victims = [n for n in sorted(set(watch.leaders().values())) if n != coordinator]
    victim = max(victims, key=lambda n: (len(watch.led_by(n)) == 2, -n))
    dead_led = watch.led_by(victim)
    assert len(dead_led) == 2, f"no broker but the coordinator leads 2 of 6: {watch.leaders()}"

    op = operator()
    manifest = consumer_group(
        NAME, cluster_intact.bootstrap, group.topic, group_id=group.group, autoscaling=AUTOSCALING
    )
    apply(k8s, namespace, manifest)
    wait_until(lambda: serving(op), 60, "the operator's /metrics", every=SAMPLE_S)
    sampler = Sampler(k8s, namespace, op, group).start()
    sampled.append(sampler)
    wait_until(
        lambda: sampler.first(
            0, lambda s: s.exact and s.spec_replicas == s.deployment_replicas == REPLICAS
        ),
        120,
        f"the operator to read lag {LAG} and scale to {REPLICAS} replicas",
        every=SAMPLE_S,
    )
    settled = sampler.samples[-1]

    cluster_intact.kill(victim)
    killed = time.monotonic()
    # The reading is possible again once no partition is led by the dead broker (fenced
    # after 9 s, well within the 30 s it stays dead).
    wait_until(
        lambda: not watch.led_by(victim),
        MOVE_S,
        f"broker {victim}'s leaderships to move",
        every=SAMPLE_S,
    )
    moved = time.monotonic()
    time.sleep(max(0.0, killed + DEAD_S - time.monotonic()))
    cluster_intact.revive(victim)
    revived = time.monotonic()
    elect_preferred_leaders(cluster_intact, watch, victim, dead_led)
    led_again = time.monotonic()
    wait_until(
        lambda: sampler.first(led_again + INTERVAL_S, lambda s: s.exact),
        WITHIN_S,
        f"lag {LAG} and Degraded False after broker {victim} leads again",
        every=SAMPLE_S,
    )
    time.sleep(3 * INTERVAL_S)  # a few passes more on the settled cluster
    sampler.stop()
    alive = op.proc is not None and op.proc.poll() is None

    samples = [s for s in sampler.samples if s.at >= settled.at]
    print(
        f"\nkilled broker {victim} (leading {dead_led}; coordinator {coordinator}) at 0 s; "
        f"its leaderships moved at {moved - killed:.1f} s; revived at {revived - killed:.1f} s; "
        f"leading again at {led_again - killed:.1f} s"
    )
    print("\n".join(s.line(killed) for s in samples))
    report = f"{operator_log(op)}\nsampling errors: {sampler.errors}"
    assert not sampler.errors, report
    assert alive, f"the operator process died\n{report}"

    # Degraded within a read and a pass of the kill, naming a partition the dead broker led.
    unreadable = sampler.first(killed, lambda s: s.degraded.get("status") == "True")
    assert unreadable is not None, f"never Degraded\n{report}"
    assert unreadable.at - killed < WITHIN_S, report
    assert unreadable.degraded["reason"] == "LagUnreadable", report
    message = unreadable.degraded["message"]
    named = [p for p in dead_led if f"the offsets of {p} cannot be read" in message]
    assert named, f"{message!r} names none of {dead_led}"
    assert f"holding {REPLICAS} replicas" in message
    # Never a smaller figure, never a move of the replicas, never a failed pass.
    assert {s.lag for s in samples} == {LAG}, report
    assert {s.lag_gauge for s in samples} <= {None, LAG}, report
    assert {(s.spec_replicas, s.deployment_replicas) for s in samples} == {(REPLICAS,) * 2}
    assert {s.scales for s in samples} == {settled.scales}, report
    assert {s.errors for s in samples} == {settled.errors}, report
    assert {s.degraded.get("reason") for s in samples if s.degraded.get("status") == "True"} == {
        "LagUnreadable"
    }, report
    # The exact lag again within a read and a pass of the reading becoming possible (the
    # leaderships moved to the live brokers), and then through the broker's return and the
    # move of its leaderships back.
    exact = sampler.first(moved, lambda s: s.exact)
    assert exact is not None, report
    assert exact.at - moved < WITHIN_S, report
    assert samples[-1].exact, report
    failed = [s for s in samples if s.at > exact.at and not s.exact]
    print(
        f"Degraded {unreadable.at - killed:.1f} s after the kill: {message!r}; exact again "
        f"{exact.at - moved:.1f} s after the leaderships moved; not exact after that: "
        f"{len(failed)} samples; failed reads: {samples[-1].failures}"
    )
    assert not failed, "\n".join(s.line(killed) for s in failed) + f"\n{report}"
