"""A worker of the ``spark`` image runs Spark in its own process, on a real node, as non-root
with a read-only root filesystem: its billed orders land in a Delta table on the pod's volume,
every order produced, read back from the table's own log and Parquet files."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.e2e.conftest import Release
from tests.e2e.fleet import Cluster, apply, consumer_group, produce_orders, wait_pods_ready
from tests.infra.waiting import wait_until

TABLE = "/tmp/billing-delta"  # on the worker's /tmp volume (an emptyDir)

# Run in the worker's container: the orders in the Delta table, from the files its log adds.
READ_TABLE = f"""
import glob, json, os
import pyarrow.parquet as pq
files = set()
for entry in sorted(glob.glob("{TABLE}/_delta_log/*.json")):
    for line in open(entry):
        action = json.loads(line)
        if "add" in action:
            files.add(action["add"]["path"])
        if "remove" in action:
            files.discard(action["remove"]["path"])
orders = []
for path in files:
    orders += pq.read_table(os.path.join("{TABLE}", path), columns=["order"]).column(0).to_pylist()
print(json.dumps(orders))
"""

# The first test to ask for the real node builds nothing (make test built the images first)
# but starts the node, imports the images and installs the chart: minutes on a busy machine.
pytestmark = pytest.mark.timeout(900)


def test_a_spark_worker_writes_every_billed_order_to_a_delta_table_on_its_volume(
    fleet_cluster: Cluster, operator: Release, admin: AdminClient, kafka: str, pod_kafka: str
) -> None:
    ns, name = operator.watched, "billing-delta"
    topic = f"orders-{name}-{time.time_ns()}"
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    orders = produce_orders(kafka, topic, 0, 200)
    group = consumer_group(
        name,
        fleet_cluster.images.examples_spark,
        pod_kafka,
        topic,
        pod_template=fleet_cluster.placement,
        spark={"table": TABLE, "master": "local[1]", "batch": {"linger_ms": 500}},
        resources={"requests": {"memory": "768Mi"}, "limits": {"memory": "1536Mi"}},
    )
    apply(fleet_cluster, ns, group)
    (pod,) = wait_pods_ready(fleet_cluster, ns, name, 1)

    def table() -> list[int]:
        out = fleet_cluster.kubectl(
            "exec", "-n", ns, pod, "-c", "worker", "--", "python3", "-c", READ_TABLE, check=False
        )
        try:
            return list(json.loads(out))
        except json.JSONDecodeError:
            return []

    wait_until(lambda: set(table()) >= orders, 240, "every order in the Delta table", every=3)
    rows = table()
    assert set(rows) == orders, sorted(set(rows) ^ orders)[:20]
    log = fleet_cluster.kubectl("logs", "-n", ns, pod, "-c", "worker")
    assert "Traceback" not in log, log[-3000:]
    fleet_cluster.kubectl("delete", "kcg", "-n", ns, name, "--wait=false")
