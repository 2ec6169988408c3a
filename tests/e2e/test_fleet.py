"""The fleet as a user runs it, on a node that runs containers: the chart's operator is a Ready
pod; a ConsumerGroup's workers join the group, bill every order written to the topic and bring
its lag to 0; they run restricted (read-only root, non-root, no capabilities); a worker with
Spark in its process writes a Delta table to a volume; and deleting the group stops every
worker with SIGTERM, a drain, a commit and exit code 0 within its grace period."""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.e2e.conftest import Release
from tests.e2e.fleet import (
    Cluster,
    LogFollower,
    PodWatch,
    apply,
    billed,
    committed,
    consumer_group,
    end_offsets,
    last_billed,
    logs,
    orders_below,
    produce_orders,
    wait_pods_ready,
)
from tests.infra.waiting import wait_until

PARTITIONS = 4

# The first test to ask for the real node builds nothing (make test built the images first)
# but starts the node, imports the images and installs the chart: minutes on a busy machine.
pytestmark = pytest.mark.timeout(900)


def _topic(admin: AdminClient, name: str) -> str:
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(30)
    return name


def _group(cluster: Cluster, name: str, image: str, pod_kafka: str, topic: str, **spec: Any) -> Any:
    return consumer_group(name, image, pod_kafka, topic, pod_template=cluster.placement, **spec)


def test_the_chart_runs_two_ready_operator_pods_with_their_in_cluster_identity_one_leading(
    fleet_cluster: Cluster, operator: Release
) -> None:
    pods = fleet_cluster.json(
        "get", "pods", "-n", operator.namespace, "-l", "app.kubernetes.io/name=kafleet-operator"
    )["items"]
    assert len(pods) == 2, [p["metadata"]["name"] for p in pods]
    leading = []
    for pod in pods:
        (status,) = pod["status"]["containerStatuses"]
        assert (status["ready"], status["restartCount"]) == (True, 0), status
        assert "running" in status["state"]
        assert pod["spec"]["serviceAccountName"] == "kafleet-operator"
        log = fleet_cluster.kubectl("logs", "-n", operator.namespace, pod["metadata"]["name"])
        assert f"watching ['{operator.watched}']" in log, log[-2000:]
        leading += [pod["metadata"]["name"]] if "leads shards [0] of 1" in log else []
    assert len(leading) >= 1, "no operator pod says it leads the shard"


def test_a_consumer_group_bills_every_order_on_real_pods_and_its_lag_reaches_zero(
    fleet_cluster: Cluster,
    operator: Release,
    admin: AdminClient,
    kafka: str,
    pod_kafka: str,
) -> None:
    ns, name = operator.watched, "billing"
    topic = _topic(admin, f"orders-{name}-{time.time_ns()}")
    orders = produce_orders(kafka, topic, 0, 400)
    apply(
        fleet_cluster,
        ns,
        _group(fleet_cluster, name, fleet_cluster.images.examples, pod_kafka, topic, replicas=2),
    )

    workers = wait_pods_ready(fleet_cluster, ns, name, 2)

    def all_billed() -> bool:
        seen = [n for pod in workers for n in billed(logs(fleet_cluster, ns, pod))]
        return set(seen) >= orders

    wait_until(all_billed, 180, "every order billed by the workers", every=2)
    for pod in workers:
        text = logs(fleet_cluster, ns, pod)
        assert "assigned [" in text, f"{pod} never joined:\n{text[-2000:]}"
    seen = [n for pod in workers for n in billed(logs(fleet_cluster, ns, pod))]
    assert sorted(set(seen)) == sorted(orders), "billed orders that were never written"
    wait_until(
        lambda: committed(kafka, name, topic, PARTITIONS) == end_offsets(kafka, topic, PARTITIONS),
        60,
        "the group's lag to reach 0",
        every=1,
    )
    # The operator, in its pod, reads the same lag through the pods' listener.
    wait_until(
        lambda: fleet_cluster.json("get", "kcg", "-n", ns, name).get("status", {}).get("lag") == 0,
        60,
        "the ConsumerGroup's status to say lag 0",
        every=1,
    )
    fleet_cluster.kubectl("delete", "kcg", "-n", ns, name, "--wait=false")


def test_worker_pods_run_restricted_with_only_their_volumes_writable(
    fleet_cluster: Cluster, operator: Release, admin: AdminClient, pod_kafka: str
) -> None:
    ns, name = operator.watched, "restricted"
    topic = _topic(admin, f"orders-{name}-{time.time_ns()}")
    apply(
        fleet_cluster,
        ns,
        _group(fleet_cluster, name, fleet_cluster.images.examples, pod_kafka, topic),
    )
    (pod,) = wait_pods_ready(fleet_cluster, ns, name, 1)
    probe = (
        "import os, json\n"
        "def writable(p):\n"
        "    try:\n"
        "        open(os.path.join(p, '.probe'), 'w').close(); return True\n"
        "    except OSError:\n"
        "        return False\n"
        "status = dict(l.split(':\\t', 1) for l in open('/proc/self/status').read().splitlines()"
        " if ':\\t' in l)\n"
        "print(json.dumps({'uid': os.getuid(), 'gid': os.getgid(),"
        " 'caps': [status[c].strip() for c in ('CapEff', 'CapPrm', 'CapBnd', 'CapAmb')],"
        " 'no_new_privs': status['NoNewPrivs'].strip(),"
        " 'seccomp': status['Seccomp'].strip(),"
        " 'read_only_root': bool(os.statvfs('/').f_flag & os.ST_RDONLY), 'root': writable('/'),"
        " 'app': writable('/opt'), 'tmp': writable('/tmp'),"
        " 'state': writable('/var/run/kafleet')}))\n"
    )
    restricted = {
        "uid": 65532,
        "gid": 65532,
        # No capability at all, not even in the bounding set (drop: [ALL]).
        "caps": ["0000000000000000"] * 4,
        "no_new_privs": "1",
        "seccomp": "2",  # filtered: the runtime's default profile
        "read_only_root": True,  # the root filesystem is mounted read-only
        "root": False,
        "app": False,
        "state": True,  # the shared state volume
    }
    for container in ("worker", "sidecar"):
        seen = json.loads(
            fleet_cluster.kubectl(
                "exec", "-n", ns, pod, "-c", container, "--", "python3", "-c", probe
            )
        )
        assert {k: seen[k] for k in restricted} == restricted, f"{container}: {seen}"
        if container == "worker":
            assert seen["tmp"], "the worker's /tmp volume is not writable"
    fleet_cluster.kubectl("delete", "kcg", "-n", ns, name, "--wait=false")


def test_deleting_the_group_drains_each_worker_which_commits_and_exits_zero_in_its_grace(
    fleet_cluster: Cluster,
    operator: Release,
    admin: AdminClient,
    kafka: str,
    pod_kafka: str,
    tmp_path: Path,
) -> None:
    ns, name = operator.watched, "draining"
    topic = _topic(admin, f"orders-{name}-{time.time_ns()}")
    # 10,000 orders of 20 ms, ordered per partition: about 50 s of work for the two workers,
    # so that each has records in its handlers and queues when SIGTERM comes; short queues (40
    # records, under a second of work per partition), so that the drain finishes them well
    # within shutdown_grace_s rather than stopping at its deadline.
    produce_orders(kafka, topic, 0, 10_000)
    group = _group(
        fleet_cluster,
        name,
        fleet_cluster.images.examples,
        pod_kafka,
        topic,
        replicas=2,
        shutdown_grace_s=20,
        max_poll_records=20,
        queue={"max_records": 40},
    )
    apply(fleet_cluster, ns, group)
    workers = wait_pods_ready(fleet_cluster, ns, name, 2)
    followers = [LogFollower(fleet_cluster, ns, pod, tmp_path) for pod in workers]
    wait_until(
        lambda: all(len(billed(f.text())) >= 20 for f in followers),
        120,
        "both workers billing",
        every=0.5,
    )
    watch = PodWatch(fleet_cluster, ns, name)
    wait_until(lambda: watch.seen >= set(workers), 30, "the watch to see both pods", every=0.2)
    lag = sum(end_offsets(kafka, topic, PARTITIONS).values()) - sum(
        max(o, 0) for o in committed(kafka, name, topic, PARTITIONS).values()
    )
    assert lag > 1000, f"the workers had almost nothing left to do ({lag} records)"
    fleet_cluster.kubectl("delete", "kcg", "-n", ns, name, "--wait=false")

    wait_until(
        lambda: all((pod, "worker") in watch.terminated for pod in workers),
        120,
        "every worker container to exit",
        every=0.5,
    )
    watch.close()
    for f in followers:
        f.close()
    for pod in workers:
        state = watch.terminated[(pod, "worker")]
        text = (tmp_path / f"{pod}.log").read_text(errors="replace")
        assert state["exitCode"] == 0, f"{pod} exited {state}:\n{text[-3000:]}"
        # deletionTimestamp is when the grace period ends; it began grace seconds before.
        grace = watch.grace[pod]
        asked = _seconds(watch.deletion[pod]) - grace
        took = _seconds(state["finishedAt"]) - asked
        assert took <= grace, f"{pod} took {took:.0f} s of its {grace} s grace"
        assert took < 20, f"{pod} drained for {took:.0f} s: until shutdown_grace_s, not done"
        assert "SIGTERM: draining" in text, text[-3000:]
        assert "stopped cleanly" in text, text[-3000:]
    offsets = committed(kafka, name, topic, PARTITIONS)
    last = last_billed(text for text in (f.text() for f in followers))
    # The drain's commit covers every order billed, and nothing more: each partition's committed
    # offset is the one after its last billed order (they are billed in order per partition).
    assert {p: o for p, o in offsets.items() if o >= 0} == {p: o + 1 for p, o in last.items()}
    done = {n for f in followers for n in billed(f.text())}
    below = orders_below(kafka, topic, offsets)
    assert below <= done, f"committed but never billed: {sorted(below - done)[:20]}"


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
