"""Fixtures for the operator's tests on the real control plane and the real broker: the CRD
installed once, real ``kafleet operator`` processes, and ConsumerGroups applied with kubectl;
a group with a known lag on the three-broker cluster (``lagging_group``), and a group's
autoscaling passes driven with the readings a test gives (``lag_passes``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import kopf
import pytest
import yaml
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from prometheus_client.parser import text_string_to_metric_families

from kafleet_operator.policy import scaling
from kafleet_operator.policy.conditions import Condition
from kafleet_operator.policy.spec import parse_spec
from kafleet_operator.reading import snapshots
from kafleet_operator.reconcile import autoscaler, periodic
from tests.conftest import REPO, K8s
from tests.infra.kafka_cluster import KafkaCluster
from tests.infra.ports import free_port
from tests.infra.waiting import wait_until

CRD = REPO / "crds" / "consumergroups.kafleet.io.yaml"


@pytest.fixture(scope="session")
def crd(k8s: K8s) -> str:
    k8s.kubectl("apply", "--server-side", "-f", str(CRD))
    # Not `kubectl wait --for=condition`: it errs on a CRD whose status has no conditions yet;
    # so does this filter (`<nil> is not array`) until they come: not checked, asked again.
    established = "{.status.conditions[?(@.type=='Established')].status}"
    wait_until(
        lambda: (
            k8s.kubectl(
                "get", "crd/consumergroups.kafleet.io", "-o", f"jsonpath={established}", check=False
            ).strip()
            == "True"
        ),
        30,
        "the CRD Established",
        every=0.2,
    )
    return "consumergroups.kafleet.io"


class Operator:
    def __init__(
        self,
        k8s: K8s,
        namespace: str,
        log: Path,
        sidecar_url: str,
        args: Sequence[str] = (),
        env: Mapping[str, str | None] | None = None,
    ) -> None:
        self.k8s, self.namespace, self.log, self.sidecar_url = k8s, namespace, log, sidecar_url
        self.args, self.env = list(args), dict(env or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.liveness = free_port()
        self.metrics_port = free_port()

    def start(self) -> Operator:
        cmd = [
            sys.executable,
            "-m",
            "kafleet",
            "operator",
            "--namespace",
            self.namespace,
            "--kubeconfig",
            str(self.k8s.kubeconfig),
            "--interval-s",
            "1",
            "--sidecar-url",
            self.sidecar_url,
            "--liveness",
            f"http://127.0.0.1:{self.liveness}/healthz",
            "--metrics-address",
            f"127.0.0.1:{self.metrics_port}",
            *self.args,
        ]
        env = {**os.environ, **self.env}  # a variable given None is left out
        out = open(self.log, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env={k: v for k, v in env.items() if v is not None},
        )
        return self

    def metric(self, name: str, **labels: str) -> float | None:
        """The value of the sample ``name`` with these labels on the operator's ``/metrics``."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and sample.labels == labels:
                    return float(sample.value)
        return None

    def tail(self, lines: int = 40) -> str:
        """The last lines of this operator's log, for a failure's message."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return f"operator log {self.log}:\n" + "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


@pytest.fixture
def operator(
    k8s: K8s, crd: str, namespace: str, tmp_path: Path
) -> Iterator[Callable[..., Operator]]:
    """``operator(sidecar_url=..., args=[...], env={...})``: a real operator process watching
    the test's namespace (``args``: more flags; ``env``: variables over the test's, None
    leaving one out)."""
    started: list[Operator] = []

    def start(
        sidecar_url: str = "http://{pod_ip}:8080",
        args: Sequence[str] = (),
        env: Mapping[str, str | None] | None = None,
    ) -> Operator:
        log = tmp_path / f"operator-{len(started)}.log"
        op = Operator(k8s, namespace, log, sidecar_url, args, env)
        started.append(op.start())
        return op

    yield start
    for op in started:
        op.stop()


def consumer_group(name: str, kafka: str, topic: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kafleet.io/v1alpha1",
        "kind": "ConsumerGroup",
        "metadata": {"name": name},
        "spec": {
            "image": "registry.example.com/worker:1",
            "handler": "orders:bill",
            "bootstrap_servers": kafka,
            "group_id": f"{name}-{os.getpid()}",
            "topics": [topic],
            # The sidecars of kwok's pods do not exist: tuning tests turn it on themselves.
            "tuning": {"enabled": False},
            **spec,
        },
    }


def apply(k8s: K8s, namespace: str, manifest: dict[str, Any], check: bool = True) -> str:
    return k8s.kubectl(
        "apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest), check=check
    )


def get(k8s: K8s, namespace: str, kind: str, name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(
        k8s.kubectl("get", "-n", namespace, kind, name, "-o", "json")
    )
    return loaded


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond["type"] == kind:
            return dict(cond)
    return {}


def wait_condition(
    k8s: K8s, namespace: str, name: str, kind: str, status: str, timeout: float = 60
) -> dict[str, Any]:
    wait_until(
        lambda: condition(get(k8s, namespace, "kcg", name), kind).get("status") == status,
        timeout,
        f"{name}: condition {kind}={status}",
        every=0.5,
    )
    return condition(get(k8s, namespace, "kcg", name), kind)


def apply_ready(k8s: K8s, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
    """Apply a ConsumerGroup and wait until the operator reports it Ready; the condition."""
    apply(k8s, namespace, manifest)
    return wait_condition(k8s, namespace, manifest["metadata"]["name"], "Ready", "True", 90)


@dataclass(frozen=True)
class LaggingGroup:
    """A topic of the three-broker cluster with records in every partition, and a Kafka group
    that committed part of each: its lag is known to the record."""

    topic: str
    group: str
    ends: dict[int, int]
    committed: dict[int, int]

    @property
    def lag(self) -> int:
        return sum(self.ends[p] - self.committed[p] for p in self.ends)

    @property
    def want(self) -> snapshots.Want:
        return snapshots.Want(self.group, (self.topic,))


@pytest.fixture
def lagging_group(
    cluster_intact: KafkaCluster, request: pytest.FixtureRequest
) -> Callable[..., LaggingGroup]:
    """``lagging_group(partitions, records=None, committed=None)``: a topic of ``partitions``
    (replicated on the three nodes, ``min.insync.replicas`` 2) with ``records[p]`` records in
    partition ``p`` (by default 300 in each), and a group that committed ``committed[p]`` in
    each (by default 50 fewer in each partition than in the one before; partition 0: none)."""
    name = re.sub(r"[^a-zA-Z0-9]+", "-", request.node.name).strip("-")[:50]

    def make(
        partitions: int = 6,
        records: Sequence[int] | None = None,
        committed: Sequence[int] | None = None,
    ) -> LaggingGroup:
        topic = f"rolling-{name}-{uuid.uuid4().hex[:8]}"
        bootstrap: dict[str, str | int | float | bool] = {
            "bootstrap.servers": cluster_intact.bootstrap
        }
        admin = AdminClient(bootstrap)
        admin.create_topics([NewTopic(topic, partitions)])[topic].result(30)
        producer = Producer({**bootstrap, "acks": "all"})
        ends = dict(enumerate([300] * partitions if records is None else records))
        assert len(ends) == partitions, f"{len(ends)} record counts for {partitions} partitions"
        for partition, end in ends.items():
            for n in range(end):
                producer.produce(topic, str(n).encode(), partition=partition)
        assert producer.flush(30) == 0
        if committed is None:
            committed = [50 * p for p in range(partitions)]
        commits = dict(enumerate(committed))
        assert len(commits) == partitions, f"{len(commits)} commits for {partitions} partitions"
        committer = Consumer({**bootstrap, "group.id": f"{topic}-group"})
        try:
            offsets = [TopicPartition(topic, p, o) for p, o in commits.items()]
            # A group's coordinator may still be loading its offsets partition (a cluster
            # whose broker was just restarted: COORDINATOR_LOAD_IN_PROGRESS, retriable).
            wait_until(lambda: _committed(committer, offsets), 60, "the group's first commit")
        finally:
            committer.close()
        return LaggingGroup(topic, f"{topic}-group", ends, commits)

    return make


def _committed(committer: Consumer, offsets: list[TopicPartition]) -> bool:
    try:
        committer.commit(offsets=offsets, asynchronous=False)
    except KafkaException as exc:
        if not exc.args[0].retriable():
            raise
        return False
    return True


@dataclass
class Passes:
    """One ConsumerGroup's autoscaling passes (``autoscaler.observe_lag``, as ``observer.py``
    calls it each interval) on the readings a test gives, at ``replicas``; the decisions that
    scale are kept in ``decisions`` instead of applied (``lag_passes``)."""

    want: snapshots.Want
    replicas: int
    autoscaling: dict[str, Any]
    decisions: list[scaling.Decision]
    memo: dict[str, Any] = field(default_factory=dict)

    def observe(self, reading: snapshots.Snapshot | Exception) -> tuple[Condition, kopf.Patch]:
        """This pass's ``Degraded`` condition and status patch, on ``reading`` (a snapshot of
        the group's cluster, or what kept it)."""
        topics = list(self.want.topics)
        manifest = consumer_group("passes", "kafka:9092", topics[0], autoscaling=self.autoscaling)
        body = kopf.Body(
            cast(
                kopf.RawBody,
                {
                    "apiVersion": "kafleet.io/v1alpha1",
                    "kind": "ConsumerGroup",
                    "metadata": {"name": "passes", "namespace": "test", "generation": 1},
                    "spec": {**manifest["spec"], "topics": topics},
                    "status": {},
                },
            )
        )
        self.memo[periodic.KAFKA] = (reading, self.want)
        patch = kopf.Patch()
        degraded, _ = autoscaler.observe_lag(
            body,
            parse_spec(dict(body["spec"])),
            body.status,
            patch,
            self.memo,
            self.replicas,
            self.replicas,
            1,
        )
        return degraded, patch


@pytest.fixture
def lag_passes(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Passes]:
    """``lag_passes(want, replicas, autoscaling)``: a group's passes whose decisions are kept,
    every one, the decisions that change nothing included (``Passes``)."""
    kept: list[scaling.Decision] = []

    def keep(
        body: Any, parsed: Any, patch: Any, memo: Any, decision: scaling.Decision, *_: Any
    ) -> None:
        kept.append(decision)

    monkeypatch.setattr(autoscaler, "_apply", keep)

    def make(want: snapshots.Want, replicas: int, autoscaling: dict[str, Any]) -> Passes:
        return Passes(want, replicas, autoscaling, kept)

    return make
