"""B8, the autopilot against KEDA, on the real node with real workers.

(The issue that asked for it calls it B7; ``b7_delta_resume.py`` had the name already.)

One lag trace (``autopilot_trace.Trace``: steady input at half a replica's capacity, then ten
times that for two minutes, then idle) is run on the same fleet, same topic layout, same
threshold, once per scaler: kafleet's operator (the chart's defaults, a pass every 5 s); a
faithful model of KEDA's Kafka scaler and the HPA (``keda_hpa.py``: the metric read from Kafka
at each 15 s HPA sync, as KEDA v2.21 does with ``minReplicaCount`` >= 1) writing the
ConsumerGroup's scale subresource; and real KEDA v2.21 with the HPA of kube-controller-manager
(``autopilot_keda.py``) at its default ``pollingInterval`` (30 s) and tuned (5 s). All but
kafleet's run have ``autoscaling.external: true``, so the operator only reports and applies
``spec.replicas``. Every scale-down window is shortened from 300 s to ``DOWN_WINDOW_S`` alike,
so a run ends in minutes. The burst begins ``HPA_PHASE_S`` before an HPA sync in the model's
and the real HPA's runs. Every second the run samples the wished replicas, the Deployment's
pods, and the group's lag from Kafka; ``autopilot_trace.summarise`` makes the figures.

Does not own the test bed (``fleet_bed.py``), the policies, or KEDA's ScaledObject and processes
(``autopilot_keda.py``, ``tests/infra/keda.py``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import kubernetes
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from bench import autopilot_keda, fleet_bed, keda_hpa
from bench.autopilot_trace import Figures, Sample, Trace, summarise
from bench.harness import Context, Table
from tests.infra import kafka as kafka_infra
from tests.infra import keda as keda_infra

PARTITIONS = 12
WORK_S = 0.1  # a record's work; 4 threads: one replica handles 40 records a second
CONCURRENCY = 4
THRESHOLD = 100  # KEDA's lagThreshold and kafleet's lag_per_replica
DOWN_WINDOW_S = 60  # both scale-down windows (the HPA's default is 300 s)
MAX_REPLICAS = PARTITIONS
SAMPLE_S = 1.0  # the runs sample every second
T = TypeVar("T")
# The HPA's syncs come every 15 s at a phase of its own; the burst lands at a random point of
# that cycle, 7.5 s before the next sync on average. The syncs are placed so the burst starts
# exactly 7.5 s before one (the trace's steady part is a whole number of syncs), the mean case
# rather than the best (a sync just after the burst) or the worst (just before it).
HPA_PHASE_S = 7.5
TRACE = Trace(steady_per_s=20, steady_s=60, burst_s=120, idle_s=240)
QUICK = Trace(steady_per_s=20, steady_s=15, burst_s=40, idle_s=120)
KEDA = keda_hpa.Settings(
    lag_threshold=THRESHOLD,
    min_replicas=1,
    max_replicas=MAX_REPLICAS,
    down_window_s=DOWN_WINDOW_S,
    offset_reset_latest=False,  # the workers' auto_offset_reset: earliest
)


@dataclass(frozen=True)
class Policy:
    label: str  # the table's row
    slug: str  # in the group's name and the samples' file
    model: bool = False  # keda_hpa's model writes the scale subresource
    real: keda_hpa.Settings | None = None  # real KEDA with this ScaledObject


POLICIES = (
    Policy("kafleet", "kafleet"),
    Policy("KEDA model (HPA 15 s)", "model", model=True),
    Policy(f"KEDA {autopilot_keda.VERSION}, polling 30 s", "keda30",
           real=replace(KEDA, polling_interval_s=30.0)),
    Policy(f"KEDA {autopilot_keda.VERSION}, polling 5 s", "keda5",
           real=replace(KEDA, polling_interval_s=5.0)),
)  # fmt: skip


def _group(bed: fleet_bed.Bed, name: str, topic: str, bootstrap: str, external: bool) -> Any:
    autoscaling: dict[str, Any] = {
        "min_replicas": 1,
        "max_replicas": MAX_REPLICAS,
        "lag_per_replica": THRESHOLD,
        "scale_down_stabilization_s": DOWN_WINDOW_S,
        "external": external,
    }
    return {
        "apiVersion": "kafleet.io/v1alpha1",
        "kind": "ConsumerGroup",
        "metadata": {"name": name},
        "spec": {
            "image": bed.image,
            "handler": "load:work",
            "bootstrap_servers": bootstrap,
            "group_id": name,
            "topics": [topic],
            "auto_offset_reset": "earliest",
            "concurrency": CONCURRENCY,
            # By key, over a thousand keys: a replica's threads all work whatever partitions
            # it has (by partition, 12 partitions would cap the fleet at 12 records in flight,
            # and more than 3 replicas would add nothing).
            "ordering": "key",
            "replicas": 1,
            "autoscaling": autoscaling,
            "tuning": {"enabled": False},
            "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}},
            "pod_template": {
                **fleet_bed.PLACEMENT,
                "worker": {"env": [{"name": "LOAD_WORK_S", "value": str(WORK_S)}]},
            },
        },
    }


class Input(threading.Thread):
    """Writes the trace's records to the topic, on time, round-robin over the partitions."""

    def __init__(self, bootstrap: str, topic: str, trace: Trace, started: float) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.topic, self.trace, self.started = topic, trace, started
        self.sent = 0

    def run(self) -> None:
        while (t := time.monotonic() - self.started) < self.trace.total_s:
            due = self.trace.due(t)
            while self.sent < due:
                self.producer.produce(
                    self.topic,
                    b'{"n": %d}' % self.sent,
                    key=b"key-%d" % (self.sent % 1000),
                    partition=self.sent % PARTITIONS,
                )
                self.sent += 1
            self.producer.poll(0)
            time.sleep(0.05)
        self.producer.flush(30)


def _retried(read: Callable[[], T], attempts: int = 5) -> T:
    """``read()``, tried again after half a second on a KafkaException."""
    for attempt in range(attempts):
        try:
            return read()
        except KafkaException:
            if attempt == attempts - 1:
                raise
            time.sleep(0.5)
    raise AssertionError("unreachable")


class Observer:
    """The group's lag per partition from Kafka, and the replicas from the apiserver."""

    def __init__(self, bed: fleet_bed.Bed, bootstrap: str, name: str, topic: str) -> None:
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self.reader = Consumer({"bootstrap.servers": bootstrap, "group.id": name})
        api = kubernetes.config.new_client_from_config(config_file=str(bed.kubeconfig))
        self.apps, self.custom = (
            kubernetes.client.AppsV1Api(api),
            kubernetes.client.CustomObjectsApi(api),
        )
        self.bed, self.bootstrap, self.name, self.topic = bed, bootstrap, name, topic

    def offsets(self) -> tuple[dict[int, int], dict[int, int | None]]:
        """Log-end and committed offsets per partition, each read tried 5 times: a topic just
        made answers NOT_LEADER_FOR_PARTITION until its leader is known. The committed ones
        through a consumer: AdminClient.list_consumer_group_offsets crashes confluent-kafka
        2.16.1 while a new group's coordinator loads (a segfault in rd_kafka_cgrp_op;
        lag_reader.py met it too)."""
        tps = [TopicPartition(self.topic, p) for p in range(PARTITIONS)]

        def ends() -> dict[int, int]:
            found = self.admin.list_offsets({tp: OffsetSpec.latest() for tp in tps})
            return {tp.partition: f.result(10).offset for tp, f in found.items()}

        end = _retried(ends)
        found = _retried(lambda: self.reader.committed(tps, timeout=10))
        done = {tp.partition: (tp.offset if tp.offset >= 0 else None) for tp in found}
        return end, done

    def scale_read(self) -> tuple[int, int]:
        """The scale subresource as the HPA reads it: spec.replicas and status.replicas."""
        group: Any = self.custom.get_namespaced_custom_object(
            "kafleet.io", "v1alpha1", self.bed.namespace, "consumergroups", self.name
        )
        status = group.get("status") or {}
        return int(group["spec"].get("replicas", 1)), int(status.get("replicas") or 0)

    def replicas(self) -> tuple[int, int, int]:
        wished = self.scale_read()[0]
        try:
            found = self.apps.read_namespaced_deployment(self.name, self.bed.namespace)
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:  # the operator has yet to make it
                return wished, 0, 0
            raise
        status = found.status or kubernetes.client.V1DeploymentStatus()
        return wished, status.replicas or 0, status.ready_replicas or 0

    def scale(self, replicas: int) -> None:
        self.custom.patch_namespaced_custom_object_scale(
            "kafleet.io",
            "v1alpha1",
            self.bed.namespace,
            "consumergroups",
            self.name,
            {"spec": {"replicas": replicas}},
        )


def _run(
    bed: fleet_bed.Bed, ctx: Context, trace: Trace, policy: Policy
) -> tuple[Figures, list[Sample], list[str]]:
    """One run of the trace under ``policy``: its figures, its samples, and notes on it."""
    name = f"b8-{policy.slug}-{int(time.time())}"
    topic = name
    admin = AdminClient({"bootstrap.servers": ctx.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    external = policy.slug != "kafleet"
    bed.apply(_group(bed, name, topic, ctx.pods_bootstrap, external=external))
    observer = Observer(bed, ctx.bootstrap, name, topic)
    deadline = time.monotonic() + 240
    while observer.replicas()[2] < 1 or observer.offsets()[1].get(0) is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name}: no ready worker committing within 240 s")
        if observer.offsets()[1].get(0) is None:  # a first commit, so lag is well defined
            seed = Producer({"bootstrap.servers": ctx.bootstrap})
            seed.produce(topic, b"{}", partition=0)
            seed.flush(10)
        time.sleep(2)
    notes: list[str] = []
    if policy.real is None:
        samples = _sample(observer, trace, time.monotonic(), policy.model)
    else:
        with autopilot_keda.scaling(bed, name, topic, ctx.bootstrap, policy.real) as real:
            started = real.syncs.start_for(trace.burst_start, HPA_PHASE_S)
            samples = _sample(observer, trace, started, False)
            first = real.syncs.first_after(started + trace.burst_start)
            seen = "none seen" if first is None else f"{first:.1f} s"
            notes.append(
                f"{policy.label}: the HPA's first sync after the burst began: {seen} (aimed at "
                f"{HPA_PHASE_S:g} s), its period {real.syncs.period():.2f} s; KEDA logged "
                f"{real.errors()} errors during the run"
            )
    observer.reader.close()
    bed.delete_group(name)
    return summarise(samples, trace, THRESHOLD), samples, notes


def _sample(observer: Observer, trace: Trace, started: float, model: bool) -> list[Sample]:
    """The trace written from ``started`` (a ``time.monotonic()``), sampled every second;
    with ``model``, ``keda_hpa``'s HPA syncs every 15 s, one ``HPA_PHASE_S`` after the burst
    began."""
    hpa = keda_hpa.KedaHpa(KEDA) if model else None
    next_sync = HPA_PHASE_S  # then every sync period on the dot, as the HPA's resync
    feed = Input(observer.bootstrap, observer.topic, trace, started)
    feed.start()
    samples: list[Sample] = []
    while (t := time.monotonic() - started) < trace.total_s:
        end, done = observer.offsets()
        if hpa is not None and t >= next_sync:
            next_sync += KEDA.sync_period_s
            spec, status = observer.scale_read()
            written = hpa.sync(t, keda_hpa.metric(end, done, KEDA), spec, status)
            if written is not None:
                observer.scale(written)
        wished, pods, ready = observer.replicas()  # after the sync: its write is seen at once
        lag = sum(max(0, e - (done.get(p) or 0)) for p, e in end.items())
        samples.append(Sample(t, wished, pods, ready, lag))
        time.sleep(max(0.0, SAMPLE_S - (time.monotonic() - started - t)))
    feed.join(30)
    return samples


def _ratio(mine: float | None, kafleet: float | None, floor: float = 0.0) -> str:
    """``mine / kafleet``, or "-" when either is missing or kafleet's is at most ``floor``."""
    if mine is None or kafleet is None or kafleet <= floor:
        return "-"
    return f"{mine / kafleet:.2f}"


def run(ctx: Context) -> Table:
    trace = QUICK if ctx.quick else TRACE
    table = Table(
        "b8",
        "the autopilot against KEDA (modelled and real): a 10x burst on real pods",
        ["policy", "first scale-up s", "lag under threshold s after burst", "replica-s", "max lag",
         "max replicas", "scale events", "reversals", "flaps", "scale-up / kafleet",
         "under threshold / kafleet", "replica-s / kafleet"],
    )  # fmt: skip
    workdir = kafka_infra.CACHE.parent / "bench-fleet"
    workdir.mkdir(parents=True, exist_ok=True)
    policies = [p for p in POLICIES if p.real is None or autopilot_keda.built()]
    results: dict[str, Figures] = {}
    run_notes: list[str] = []
    with fleet_bed.fleet_bed(workdir) as bed:
        for policy in policies:
            figures, samples, notes = _run(bed, ctx, trace, policy)
            results[policy.slug] = f = figures
            k = results["kafleet"]  # the first
            run_notes += notes
            (workdir / f"{policy.slug}-samples.tsv").write_text(
                "".join(f"{s.t:.1f}\t{s.wished}\t{s.pods}\t{s.ready}\t{s.lag}\n" for s in samples)
            )
            table.add(policy.label, f.first_scale_up_s, f.drained_s, f.replica_seconds, f.max_lag,
                      f.max_replicas, f.scale_events, f.reversals, f.flaps,
                      _ratio(f.first_scale_up_s, k.first_scale_up_s),
                      _ratio(f.drained_s, k.drained_s, SAMPLE_S),
                      _ratio(f.replica_seconds, k.replica_seconds))  # fmt: skip
    table.notes += [
        f"trace: {trace.steady_per_s:g} records/s for {trace.steady_s:g} s, "
        f"{trace.steady_per_s * trace.burst_factor:g}/s for {trace.burst_s:g} s, idle "
        f"{trace.idle_s:g} s; {PARTITIONS} partitions; {WORK_S * 1000:g} ms a record, "
        f"{CONCURRENCY} threads by key (one replica: {CONCURRENCY / WORK_S:g} records/s)",
        f"threshold {THRESHOLD} records a replica for all; replicas 1..{MAX_REPLICAS}; "
        f"scale-down windows {DOWN_WINDOW_S} s for all (the HPA's default 300 s, shortened "
        "alike; real KEDA: advanced.horizontalPodAutoscalerConfig.behavior.scaleDown."
        f"stabilizationWindowSeconds {DOWN_WINDOW_S}); kafleet: the chart's 5 s pass",
        "KEDA model: the HPA's 15 s sync reading Kafka at each sync (KEDA v2.21, "
        f"minReplicaCount 1), its first sync {HPA_PHASE_S:g} s after the burst began (the mean "
        "case), no behavior (scale up to max(2x, 4) a sync)",
        f"real KEDA {autopilot_keda.VERSION} (operator and metrics adapter as processes beside the "
        "control plane, started for its run only) and kube-controller-manager's HPA (sync 15 s, "
        "its default) scaling the ConsumerGroup through its scale subresource: a ScaledObject "
        "with the kafka trigger (same topic and group, lagThreshold "
        f"{THRESHOLD}, offsetResetPolicy earliest), pollingInterval 30 s (KEDA's default) or "
        f"5 s; the trace started so the burst began {HPA_PHASE_S:g} s before an HPA sync (syncs "
        "seen as the adapter's GetMetrics calls on KEDA's operator); a behavior set, the HPA "
        "scales up by its default policies (+4 pods or +100 % per 15 s, the larger: 1 -> 5 -> "
        "10), not the model's no-behavior max(2x, 4) (1 -> 4 -> 8)",
        *run_notes,
        "x / kafleet: the figure over kafleet's; under threshold: '-' when kafleet's is within "
        f"one sample ({SAMPLE_S:g} s: the lag was back under the threshold by the first sample "
        "after the burst, and a ratio to it would say nothing)",
        "replica-s: the Deployment's pods (ready or not) over the whole run; samples in "
        f"{workdir}/*-samples.tsv",
    ]
    if not autopilot_keda.built():
        table.notes.append(f"real KEDA is not built ({keda_infra.BIN}): make keda")
    return table
