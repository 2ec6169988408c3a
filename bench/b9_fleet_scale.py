"""B9, fleet scale: N ConsumerGroups on kafleet's operator (one process, or 2 or 4 shards) beside
N ScaledObjects on real KEDA, the same topics, the same lag step, the same control plane and
broker.

What runs is the plan (``fleet_scale_plan.py``, from the environment): by default N = 100, 300,
1,000 (``--quick``: 20), each group on a topic of its own, one operator, then KEDA; from 3,000
groups on, ten groups share each topic (N/10 topics of 8 partitions, one broker holding about
19,800 partitions), kafleet runs as one operator, then 2 shards (2 processes, ``--shards 2``),
then 4 (4 processes), and KEDA only up to 3,000 groups. For each N: the topics, every group (its
own Kafka group id) committed at its topic's log end (``fleet_scale_kafka.py``); a fresh control
plane with kwok nodes big enough for every pod (none runs: kwok marks them Running and Ready).

kafleet (interval 5 s, its calls to sidecars answered by ``FakeSidecars``; autoscaling 1..8 at
``lag_per_replica`` 100, ``scale_up_max_pods`` 8, defaults otherwise), each configuration in a
namespace of its own: its processes started (``fleet_scale_shards.py``) and every shard led,
then the groups applied server-side in chunks and timed until every one is Ready (each
configuration from nothing, so that none inherits another's apiserver state;
``KAFLEET_B9_RESTART_S`` times a restart of its operators over the groups already there, after
each configuration's step: every group passed again 55 s after a restart at 3,000 groups on a
loaded machine, with the operator's own caches in place of kopf's indexes). Then
(``fleet_scale_run.py``) 30 s to rest, a window at rest: the processes from /proc (CPU summed,
RSS, threads and connections to the broker summed and the largest process's), the broker's
requests (JMX), the apiserver's requests (its /metrics, Leases and nodes left out) and the
operators' own Lease writes (a watch); then the lag step and, per group, the time to the
decision (the ConsumerGroup's ``spec.replicas``) and to its Deployment's 8 replicas; then the
stepped groups' offsets back at the log end (every configuration's groups are the same Kafka
groups), and the namespace deleted, timed, before the next configuration.
KEDA: ``fleet_scale_keda.py``, timed from the ScaledObjects' apply.

The lag step: 2,000 records (250 a partition) into each of as many random whole topics as hold
at least 10 groups (``KAFLEET_B9_STEP_GROUPS``): with a topic a group, 10 topics, as B9 always
had; with ten groups a topic, one random topic, whose 10 groups all see a lag of 2,000 (every
group of a topic sees its records). Either way 10 groups go from 1 to 8 replicas on a lag of
2,000 each, so the step is the same size at every N, and every group that sees lag is measured.

Each size's raw figures go to ``bench/results/b9-samples.json`` (a key per size, and per groups
a topic if more than one; a key per configuration inside) as soon as they are measured; other
sizes already there are kept, and with ``KAFLEET_B9_RESUME=1`` not measured again. The table is
printed, saved by the harness and written as ``bench/results/b9.md``. ``KAFLEET_B9_PROFILE=1``
(with py-spy in the virtual environment) profiles an operator over each window at rest.

Owns the kafleet half's order, the size's order and the table. Does not own the plan, the
readers (``fleet_scale_probe.py``), the topics, the operator processes, KEDA's half, the
control plane (``tests/infra/k8s.py``) or KEDA (``tests/infra/keda.py``).
"""

from __future__ import annotations

import json
import os
import random
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from typing import Any, cast

import kubernetes

from bench import fleet_scale_figures as figures
from bench import fleet_scale_keda, fleet_scale_plan
from bench import fleet_scale_probe as probe
from bench.fleet_scale_figures import Measured
from bench.fleet_scale_kafka import PARTITIONS, Topics
from bench.fleet_scale_plan import Plan
from bench.fleet_scale_run import STEP_RECORDS, Run
from bench.fleet_scale_shards import Operators
from bench.harness import RESULTS, Context, Table
from tests.infra import k8s, kwok_nodes, processes, waiting
from tests.infra import kafka as kafka_infra
from tests.infra import keda as keda_infra

THRESHOLD, MAX_REPLICAS = 100, figures.FULL
NODE_PODS = 1000  # pods per kwok node of B9's own (the plane's two take 110 each)
PLACEMENT = {"nodeSelector": {"type": "kwok"}}
IMAGE = "registry.example.com/worker:1"  # never pulled: kwok runs no container
WORKDIR = kafka_infra.CACHE.parent / "bench-b9"
CRDS, CRD = kafka_infra.REPO_ROOT / "crds", "consumergroups.kafleet.io"
SAMPLES = RESULTS / "b9-samples.json"


def _group(name: str, topic: str, bootstrap: str) -> dict[str, Any]:
    return {
        "apiVersion": "kafleet.io/v1alpha1", "kind": "ConsumerGroup", "metadata": {"name": name},
        "spec": {"image": IMAGE, "handler": "orders:bill", "bootstrap_servers": bootstrap,
                 "group_id": name, "topics": [topic], "replicas": 1, "pod_template": PLACEMENT,
                 "autoscaling": {"min_replicas": 1, "max_replicas": MAX_REPLICAS,
                                 "lag_per_replica": THRESHOLD, "scale_up_max_pods": MAX_REPLICAS}},
    }  # fmt: skip


@dataclass(frozen=True)
class _Groups:
    """kafleet's ConsumerGroups in ``ns`` and their Deployments, as B9 reads them."""

    custom: kubernetes.client.CustomObjectsApi
    apps: kubernetes.client.AppsV1Api
    ns: str

    def ready(self) -> int:
        found = cast(dict[str, Any], self.custom.list_namespaced_custom_object(*self._kind))
        return sum(map(figures.ready, found["items"]))

    def read(self, name: str) -> tuple[bool, int]:
        """Whether it decided to scale (its ``spec.replicas``), and its Deployment's replicas."""
        group = cast(dict[str, Any], self.custom.get_namespaced_custom_object(*self._kind, name))
        deployment = self.apps.read_namespaced_deployment(name, self.ns)
        return group["spec"].get("replicas", 1) > 1, int(deployment.spec.replicas or 0)

    @property
    def _kind(self) -> tuple[str, str, str, str]:
        return "kafleet.io", "v1alpha1", self.ns, "consumergroups"


def _kafleet(run: Run, bootstrap: str, plan: Plan, keda_next: bool) -> dict[str, Measured]:
    """Every configuration at ``run``'s N, in the order of the module's docstring; the last
    one's groups are left to the plane's stop unless KEDA runs next."""
    found: dict[str, Measured] = {}
    n = len(run.topics.groups)
    configurations = plan.configurations(n)
    sidecars = probe.FakeSidecars()
    with ExitStack() as stack:
        stack.callback(sidecars.close)
        api = run.api
        for shards in configurations:
            delete = keda_next or shards != configurations[-1]
            with ExitStack() as namespaces:
                ns = namespaces.enter_context(
                    run.namespace(f"b9-kafleet-{shards}", delete, timeout_s=max(600, n // 5))
                )
                lease_ns = ""
                if shards:
                    lease_ns = namespaces.enter_context(run.namespace(f"b9-leases-{shards}"))
                groups = _Groups(kubernetes.client.CustomObjectsApi(api),
                                 kubernetes.client.AppsV1Api(api), ns)  # fmt: skip
                operators = Operators(run.plane, api, ns, shards, sidecars.url, lease_ns)
                measured = _configuration(run, bootstrap, groups, operators, plan.restart_s)
                ended = time.monotonic()
            if delete:
                measured.deleted_s = time.monotonic() - ended
            found[fleet_scale_plan.label(shards)] = measured
            _keep_partial(n, plan, found)
    return found


def _configuration(
    run: Run, bootstrap: str, groups: _Groups, operators: Operators, restart_s: float
) -> Measured:
    """One configuration, in a namespace of its own: the operators started (and every shard
    led), the groups applied and settled, at rest, the step, the stepped groups' offsets back
    at the log end (the next configuration's groups are the same Kafka groups); with
    ``restart_s``, the operators restarted and timed until every group is passed again."""
    names = list(run.topics.groups)
    measured = Measured(len(names))
    manifests = [_group(name, topic, bootstrap) for name, topic in run.topics.groups.items()]
    try:
        operators.start()
        waiting.wait_until(operators.balanced, 120, "every shard led, none over its share", 1)
        run.apply_and_settle(measured, groups.ns, manifests, groups.ready)
        profile_as = f"{fleet_scale_plan.label(operators.shards)}-{len(names)}"
        around = operators.lease_writes(measured)
        run.measure(measured, groups.read, operators.pids, operators.logs, operators.passes,
                    around, profile_as)  # fmt: skip
        measured.shards_led = operators.led()
        run.topics.commit_at_end(run.step)
        if restart_s:
            operators.stop()
            started, measured.restarted = operators.start(), True
            measured.restart_s, measured.passed = figures.settle(
                len(names), started, lambda: operators.settled(names), restart_s
            )
    finally:
        operators.stop()
    return measured


def _nodes(plane: k8s.ControlPlane, pods: int) -> None:
    """kwok nodes enough for ``pods``, made as ``make k8s-nodes`` makes them (``kwok_nodes``)."""
    kwok_nodes.keep(plane.kubectl, pods // NODE_PODS + 1, "b9-kwok", NODE_PODS)


def _established(plane: k8s.ControlPlane) -> bool:
    crd = json.loads(plane.kubectl("get", "crd", CRD, "-o", "json"))
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def _keep_partial(n: int, plan: Plan, found: dict[str, Measured]) -> None:
    """Each configuration's figures kept as soon as measured, under the size's key marked
    ``partial`` (a run stopped in the next configuration, or in KEDA's, keeps them; a resumed
    run measures the size again)."""
    raw: dict[str, Any] = json.loads(SAMPLES.read_text()) if SAMPLES.exists() else {}
    raw[f"{_key(n, plan.groups_per_topic(n))} (partial)"] = {t: asdict(m) for t, m in found.items()}
    RESULTS.mkdir(exist_ok=True)
    SAMPLES.write_text(json.dumps(raw, indent=1))


def _one_size(
    ctx: Context, plan: Plan, n: int, jmx: probe.BrokerJmx, notes: list[str]
) -> dict[str, Measured]:
    """Every scaler at ``n`` groups (fewer if the broker holds fewer topics)."""
    per_topic = plan.groups_per_topic(n)
    topics = Topics(ctx.bootstrap, probe.broker_pid(ctx.bootstrap))
    topics.create(f"b9-{n}-{int(time.time()) % 10_000}", -(-n // per_topic))
    topics.share(per_topic, n)
    topics.fill()
    if topics.refused:
        notes.append(f"N={n}: the broker took {len(topics.names)} topics: {topics.refused}")
    wanted = min(-(-plan.step_groups // per_topic), len(topics.names))
    step_topics = random.Random(n).sample(topics.names, wanted)
    step = [group for group, topic in topics.groups.items() if topic in step_topics]
    processes.reap_stale_runs(WORKDIR)
    try:
        plane = k8s.start_control_plane(WORKDIR / f"session-{os.getpid()}" / f"n{n}")
        try:
            _nodes(plane, len(topics.groups) + len(step) * MAX_REPLICAS)
            plane.kubectl("apply", "--server-side", "-f", str(CRDS))
            waiting.wait_until(lambda: _established(plane), 60, f"{CRD} established", every=0.5)
            run = Run(plane, topics, jmx, step, step_topics, plan.window_s)
            keda = plan.keda(n) and keda_infra.built() is not None
            measured = _kafleet(run, ctx.bootstrap, plan, keda)
            if keda:
                measured["KEDA"] = fleet_scale_keda.measure(run, ctx.bootstrap, IMAGE, PLACEMENT)
        finally:
            plane.stop()
    finally:
        unlisted, closed = topics.delete()
        notes.append(
            f"N={n}: {len(topics.names):,} topics, {len(topics.names) * PARTITIONS:,} partitions "
            f"created and led in {topics.created_s:.1f} s; deleted: unlisted after "
            f"{unlisted:.1f} s, their files closed after {closed:.0f} s"
        )
    return measured


def _key(n: int, per_topic: int) -> str:
    return str(n) if per_topic == 1 else f"{n}, {per_topic} a topic"


def run(ctx: Context) -> Table:
    plan = Plan.from_env(ctx.quick)
    jmx = probe.BrokerJmx(probe.broker_pid(ctx.bootstrap))
    raw: dict[str, dict[str, Any]] = json.loads(SAMPLES.read_text()) if SAMPLES.exists() else {}
    notes: list[str] = [f"plan: {plan.describe()}"]
    sizes: dict[str, dict[str, Measured]] = {}
    for n in plan.sizes:
        key = _key(n, plan.groups_per_topic(n))
        if key not in raw or not os.environ.get("KAFLEET_B9_RESUME"):
            found = _one_size(ctx, plan, n, jmx, notes)
            raw[key] = {tool: asdict(m) for tool, m in found.items()}
            raw.pop(f"{key} (partial)", None)
            RESULTS.mkdir(exist_ok=True)
            SAMPLES.write_text(json.dumps(raw, indent=1))  # each size kept as soon as measured
        sizes[key] = {tool: Measured(**m) for tool, m in raw[key].items()}
    table = _table(sizes, notes)
    (RESULTS / "b9.md").write_text(table.markdown())
    return table


def _table(sizes: dict[str, dict[str, Measured]], notes: list[str]) -> Table:
    """A column per size and scaler, then the ratios: kafleet's one operator over KEDA, and
    each sharded configuration over the one operator."""
    table = Table("b9", "fleet scale: N groups on kafleet's operator(s) and on KEDA", ["figure"])
    one = fleet_scale_plan.label(0)
    for key, measured in sizes.items():
        found = {tool: figures.rows(m) for tool, m in measured.items()}
        ratios = {f"{one} / KEDA": (one, "KEDA")} if {one, "KEDA"} <= set(found) else {}
        for tool in found:
            if one in found and tool not in (one, "KEDA"):
                ratios[f"{tool.removeprefix('kafleet ')} / 1"] = (tool, one)
        table.columns += [f"{tool} {key}" for tool in found] + list(ratios)
        for i, label in enumerate(next(iter(found.values()))):
            if len(table.rows) <= i:
                table.rows.append([label])
            table.rows[i] += ["-" if f[label] is None else f[label] for f in found.values()]
            table.rows[i] += [
                figures.ratio(found[a][label], found[b][label]) for a, b in ratios.values()
            ]
        notes += [
            f"{key}, {tool}: the goals at 10,000: {figures.goals(m)}"
            for tool, m in measured.items()
            if tool != "KEDA"
        ]
    table.notes = [*notes, *_notes()]
    if keda_infra.built() is None:
        table.notes.append(f"KEDA is not built ({keda_infra.BIN}): make keda")
    return table


def _notes() -> list[str]:
    return [
        "each N: a control plane of its own with kwok nodes; kafleet's operator (--interval-s "
        f"{figures.TICK_S:g}; 'kafleet S shards': S processes of --shards S, Leases in a "
        f"namespace of their own), then KEDA {keda_infra.KEDA_VERSION} (pollingInterval "
        f"{figures.TICK_S:g}, the HPA's 15 s sync); autoscaling 1..8 at 100 records a replica, "
        f"both allowed up to 8 pods per 15 s; the step: {STEP_RECORDS:,} records into each of "
        "its whole topics (10 random ones with a topic a group, 1 with ten), every group on "
        "them measured",
        "kafleet's operators are given Kafka's Java client (--share-classpath, as the chart's "
        "kafleet-spark image): committed offsets of every group of a cluster in one call",
        "settle: each configuration's operators start in an empty namespace of their own, lead "
        "every shard, then the groups are applied (apply -> all Ready); restart (if measured): "
        "the operators started again after the step (start -> every shard led, none over its "
        "share, every group passed by its leader)",
        "a tick is 5 s; CPU, RSS, threads, fds and connections summed over the processes "
        "(KEDA: its operator and adapter), and the largest process's; apiserver requests leave "
        "out watches, Leases and nodes (kwok's node Leases and the operators' alike) and count "
        "the HPA controller's as KEDA's; the operators' Lease writes are counted by a watch",
        "decision: kafleet's spec.replicas, KEDA's HPA desiredReplicas, leaving 1; p99 of "
        "10 groups is their slowest (nearest rank); kafleet's sidecar calls go to one fake "
        "sidecar answering as a worker that applied the default max_poll_records; raw "
        f"samples in {SAMPLES}",
    ]
