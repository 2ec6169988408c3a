"""The kubelet's probes judge the worker and restart the worker: a worker whose process is hung
(SIGSTOP: it neither polls nor writes its state) has its own container restarted by its
liveness probe, which the sidecar answers, while the sidecar keeps running (issue 21, defect 1:
the probes sat on the sidecar, so a hung worker restarted only the sidecar, for ever)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.e2e.conftest import Release
from tests.e2e.fleet import Cluster, apply, consumer_group, pods, restarts, wait_pods_ready
from tests.infra.waiting import wait_until

pytestmark = pytest.mark.timeout(900)

# Run in the sidecar, which shares the pod's process namespace and the worker's uid: stop the
# worker's process (found by its command line) as a hung handler or poller would leave it.
STOP_WORKER = """
import os, signal
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        cmdline = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\\0")
    except OSError:
        continue
    if b"worker" in cmdline and any(part.endswith(b"kafleet") for part in cmdline):
        os.kill(int(pid), signal.SIGSTOP)
        print(pid)
"""


def test_a_hung_worker_has_its_own_container_restarted_and_the_sidecar_keeps_running(
    fleet_cluster: Cluster, operator: Release, admin: AdminClient, pod_kafka: str
) -> None:
    ns, name = operator.watched, "hung"
    topic = f"orders-{name}-{time.time_ns()}"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    group = consumer_group(
        name,
        fleet_cluster.images.examples,
        pod_kafka,
        topic,
        pod_template=fleet_cluster.placement,
        shutdown_grace_s=5,
        drain_timeout_s=5,
        # The sidecar fails liveness after half of max_poll_interval_ms without a poll (10 s).
        session_timeout_ms=10_000,
        max_poll_interval_ms=20_000,
    )
    apply(fleet_cluster, ns, group)
    (pod,) = wait_pods_ready(fleet_cluster, ns, name, 1)
    stopped = fleet_cluster.kubectl(
        "exec", "-n", ns, pod, "-c", "sidecar", "--", "python3", "-c", STOP_WORKER
    )
    assert stopped.strip(), "no worker process was found to stop"

    def worker_restarted() -> bool:
        (found,) = pods(fleet_cluster, ns, name)
        return restarts(found).get("worker", 0) >= 1

    wait_until(worker_restarted, 180, "the hung worker's container to be restarted", every=2)
    (found,) = pods(fleet_cluster, ns, name)
    assert restarts(found) == {"worker": 1, "sidecar": 0}, restarts(found)
    wait_pods_ready(fleet_cluster, ns, name, 1)  # the new worker passes its probes
    fleet_cluster.kubectl("delete", "kcg", "-n", ns, name, "--wait=false")
