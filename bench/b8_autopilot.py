"""B8, the autopilot against KEDA's policy, on the real node with real workers.

(The issue that asked for it calls it B7; ``b7_delta_resume.py`` had the name already.)

One lag trace (``autopilot_trace.Trace``: steady input at half a replica's capacity, then ten
times that for two minutes, then idle) is run twice on the same fleet, same topic layout, same
threshold: once scaled by kafleet's operator (the chart's defaults, a pass every 5 s), once by
a faithful model of KEDA's Kafka scaler and the HPA (``keda_hpa.py``: the metric read from
Kafka at each 15 s HPA sync, as KEDA v2.21 does with ``minReplicaCount`` >= 1) writing the
ConsumerGroup's scale subresource, with ``autoscaling.external: true`` so the operator only
reports. Both scale-down windows are shortened from 300 s to ``DOWN_WINDOW_S`` alike, so a run
ends in minutes. Every second the run samples the wished replicas, the Deployment's pods, and
the group's lag from Kafka; ``autopilot_trace.summarise`` makes the figures.

Does not own the test bed (``fleet_bed.py``) or the policies.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import kubernetes
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from bench import fleet_bed, keda_hpa
from bench.autopilot_trace import Figures, Sample, Trace, summarise
from bench.harness import Context, Table
from tests.infra import kafka as kafka_infra

PARTITIONS = 12
WORK_S = 0.1  # a record's work; 4 threads: one replica handles 40 records a second
CONCURRENCY = 4
THRESHOLD = 100  # KEDA's lagThreshold and kafleet's lag_per_replica
DOWN_WINDOW_S = 60  # both scale-down windows (the HPA's default is 300 s)
MAX_REPLICAS = PARTITIONS
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
        self.bed, self.name, self.topic = bed, name, topic

    def offsets(self) -> tuple[dict[int, int], dict[int, int | None]]:
        """Log-end and committed offsets per partition. The committed ones through a consumer:
        AdminClient.list_consumer_group_offsets crashes confluent-kafka 2.16.1 while a new
        group's coordinator loads (a segfault in rd_kafka_cgrp_op; lag_reader.py met it too)."""
        tps = [TopicPartition(self.topic, p) for p in range(PARTITIONS)]
        ends = self.admin.list_offsets({tp: OffsetSpec.latest() for tp in tps})
        end = {tp.partition: f.result(10).offset for tp, f in ends.items()}
        for attempt in range(5):
            try:
                found = self.reader.committed(tps, timeout=10)
                break
            except KafkaException:
                if attempt == 4:
                    raise
                time.sleep(0.5)
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
    bed: fleet_bed.Bed, ctx: Context, trace: Trace, policy: str
) -> tuple[Figures, list[Sample]]:
    name = f"b8-{policy}-{int(time.time())}"
    topic = name
    admin = AdminClient({"bootstrap.servers": ctx.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    bed.apply(_group(bed, name, topic, ctx.pods_bootstrap, external=policy == "keda"))
    observer = Observer(bed, ctx.bootstrap, name, topic)
    deadline = time.monotonic() + 240
    while observer.replicas()[2] < 1 or observer.offsets()[1].get(0) is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name}: no ready worker committing within 240 s")
        if observer.offsets()[1].get(0) is None:  # a first commit, so lag is well defined
            first = Producer({"bootstrap.servers": ctx.bootstrap})
            first.produce(topic, b"{}", partition=0)
            first.flush(10)
        time.sleep(2)
    hpa = keda_hpa.KedaHpa(KEDA) if policy == "keda" else None
    next_sync = HPA_PHASE_S  # then every sync period on the dot, as the HPA's resync
    started = time.monotonic()
    feed = Input(ctx.bootstrap, topic, trace, started)
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
        time.sleep(max(0.0, 1.0 - (time.monotonic() - started - t)))
    feed.join(30)
    observer.reader.close()
    bed.delete_group(name)
    return summarise(samples, trace, THRESHOLD), samples


def run(ctx: Context) -> Table:
    trace = QUICK if ctx.quick else TRACE
    table = Table(
        "b8",
        "the autopilot against KEDA's policy: a 10x burst on real pods",
        ["policy", "first scale-up s", "lag under threshold s after burst", "replica-s", "max lag",
         "max replicas", "scale events", "reversals", "flaps"],
    )  # fmt: skip
    workdir = kafka_infra.CACHE.parent / "bench-fleet"
    workdir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Figures] = {}
    with fleet_bed.fleet_bed(workdir) as bed:
        for policy in ("kafleet", "keda"):
            figures, samples = _run(bed, ctx, trace, policy)
            results[policy] = figures
            (workdir / f"{policy}-samples.tsv").write_text(
                "".join(f"{s.t:.1f}\t{s.wished}\t{s.pods}\t{s.ready}\t{s.lag}\n" for s in samples)
            )
            f = figures
            table.add(policy, f.first_scale_up_s, f.drained_s, f.replica_seconds, f.max_lag,
                      f.max_replicas, f.scale_events, f.reversals, f.flaps)  # fmt: skip
    k, h = results["kafleet"], results["keda"]
    if k.replica_seconds and h.replica_seconds:
        table.notes.append(
            f"replica-seconds kafleet / KEDA: {k.replica_seconds / h.replica_seconds:.2f}"
        )
    if k.drained_s and h.drained_s:
        table.notes.append(
            f"lag under threshold after the burst, kafleet / KEDA: {k.drained_s / h.drained_s:.2f}"
        )
    table.notes += [
        f"trace: {trace.steady_per_s:g} records/s for {trace.steady_s:g} s, "
        f"{trace.steady_per_s * trace.burst_factor:g}/s for {trace.burst_s:g} s, idle "
        f"{trace.idle_s:g} s; {PARTITIONS} partitions; {WORK_S * 1000:g} ms a record, "
        f"{CONCURRENCY} threads by key (one replica: {CONCURRENCY / WORK_S:g} records/s)",
        f"threshold {THRESHOLD} records a replica for both; scale-down windows {DOWN_WINDOW_S} s "
        "for both (the HPA's default 300 s, shortened alike); kafleet: the chart's 5 s pass; "
        "KEDA: the HPA's 15 s sync reading Kafka at each sync (KEDA v2.21, minReplicaCount 1), "
        f"its first sync {HPA_PHASE_S:g} s after the burst began (the mean case), "
        "no behavior (scale up to max(2x, 4) a sync)",
        "replica-s: the Deployment's pods (ready or not) over the whole run; samples in "
        f"{workdir}/*-samples.tsv",
    ]
    return table
