"""A real Kafka cluster of three brokers for what one broker never shows: moves and failures.

Owns: three combined KRaft nodes (broker and controller in each JVM, a static quorum of three
voters, so one node down leaves a quorum of two), formatted with one cluster id, on free
loopback ports, with the listeners the single broker has (PLAINTEXT, SASL_PLAINTEXT with SCRAM,
and PODS / PODS_SSL for the real node's pods, every node's certificate signed by one CA);
every internal topic replicated three times with ``min.insync.replicas`` 2 (offsets,
transactions, share-group state), and the cluster's topics likewise by default; and the faults
a test makes: a clean bounce (SIGTERM: a controlled shutdown moves the node's leaders first),
a hard kill (SIGKILL), and the facts a test needs to aim them: which node coordinates a group,
which leads a partition, preferred-leader elections and partition reassignments through
Kafka's own tools.

Why three combined nodes and not one controller beside three brokers: a machine of two cores
runs three JVMs better than four, and a quorum of three lets a test kill any one node, the
active controller included, as a rolling upgrade restarts it.

Does not own: one node's process, configuration and storage (``kafka.py``: ``KafkaBroker``,
which each node is), topics' contents, nor what a test checks.

Command line, used by the Makefile (``make kafka-cluster-up`` / ``make kafka-cluster-down``)::

    python -m tests.infra.kafka_cluster up      # start (or reuse) the development cluster
    python -m tests.infra.kafka_cluster down    # stop it
    python -m tests.infra.kafka_cluster status  # its bootstrap servers, exit 1 if not running
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from tests.infra import offsets, processes
from tests.infra.kafka import (
    CACHE,
    LOOPBACK,
    PODS_HOST,
    START_TIMEOUT_S,
    KafkaBroker,
    SaslListener,
    SslListener,
    TestbedError,
    new_cluster_id,
)
from tests.infra.ports import free_port

NODES = 3
REPLICAS = 3
MIN_INSYNC = 2
DEV_CLUSTER = CACHE / "cluster-dev"


@dataclass
class ClusterNode(KafkaBroker):
    """One of the cluster's nodes: a ``KafkaBroker`` that votes in a static quorum."""

    node_id: int = 1
    cluster_id: str = ""
    voters: str = ""  # controller.quorum.voters: "1@127.0.0.1:port,2@...,3@..."

    def _quorum_arguments(self) -> list[str]:
        return ["--cluster-id", self.cluster_id]

    def _save_state(self) -> None:
        state = {
            name: str(value) if isinstance(value, Path) else value
            for name, value in dataclasses.asdict(self).items()
        }
        (self.workdir / "node.json").write_text(json.dumps(state))

    def _properties(self) -> dict[str, str | int]:
        properties = super()._properties()
        del properties["controller.quorum.bootstrap.servers"]
        return {
            **properties,
            "node.id": self.node_id,
            "controller.quorum.voters": self.voters,
            "offsets.topic.replication.factor": REPLICAS,
            "transaction.state.log.replication.factor": REPLICAS,
            "transaction.state.log.min.isr": MIN_INSYNC,
            "share.coordinator.state.topic.replication.factor": REPLICAS,
            "share.coordinator.state.topic.min.isr": MIN_INSYNC,
            "default.replication.factor": REPLICAS,
            "min.insync.replicas": MIN_INSYNC,
            # KIP-848 members' sessions as long as the classic ones the README recommends
            # (the broker's default is 45 s): a member killed for good costs a test 30 s.
            "group.consumer.session.timeout.ms": 30_000,
            "group.consumer.min.session.timeout.ms": 30_000,
        }


@dataclass
class KafkaCluster:
    """Three nodes whose folders live in ``workdir``; ``nodes[i].node_id`` is ``i + 1``."""

    workdir: Path
    nodes: list[ClusterNode] = field(default_factory=list)
    _admin: AdminClient | None = field(default=None, repr=False, compare=False)

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes)

    @property
    def pods_bootstrap(self) -> str:
        return ",".join(node.pods_bootstrap for node in self.nodes)

    @property
    def sasl(self) -> SaslListener:
        return SaslListener(",".join(node.sasl.bootstrap for node in self.nodes))

    @property
    def pods_ssl(self) -> SslListener:
        bootstrap = ",".join(f"{PODS_HOST}:{node.pods_ssl_port}" for node in self.nodes)
        return SslListener(bootstrap, self.workdir / "tls" / "ca.crt")

    def node(self, node_id: int) -> ClusterNode:
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise TestbedError(f"the cluster has no node {node_id} (it has 1 to {len(self.nodes)})")

    def running(self) -> list[ClusterNode]:
        return [node for node in self.nodes if node.pid is not None and processes.alive(node.pid)]

    def start(self, timeout: float = START_TIMEOUT_S) -> None:
        """Start every node that is not running, side by side (a quorum needs two of them
        before either answers), and wait until each serves metadata."""
        launched = [node for node in self.nodes if node.launch()]
        for node in launched:
            node.wait_ready(timeout)
        self._save()

    def stop(self) -> None:
        """Every node at once (one by one, the last would wait for a quorum that is gone)."""
        for node in self.running():
            os.kill(node.pid or 0, signal.SIGTERM)
        for node in self.nodes:
            node.stop()
        self._save()

    def bounce(self, node_id: int, down_s: float = 0.0) -> None:
        """A clean restart, as a rolling upgrade does it: SIGTERM (the controlled shutdown
        hands the node's leaderships to the others first), ``down_s`` seconds down, start."""
        node = self.node(node_id)
        node.stop()
        time.sleep(down_s)
        node.start()

    def kill(self, node_id: int) -> None:
        """SIGKILL: no controlled shutdown; its leaderships move once the controller fences
        it (``broker.session.timeout.ms``, 9 s)."""
        self.node(node_id).kill()

    def revive(self, node_id: int) -> None:
        """Start a node that was killed or stopped, and wait until it serves."""
        self.node(node_id).start()

    def admin(self) -> AdminClient:
        """The cluster's admin client, kept: a dropped client never completes its futures."""
        if self._admin is None:
            self._admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        return self._admin

    def leader(self, topic: str, partition: int) -> int:
        """The node that leads ``topic[partition]`` now (-1: none)."""
        metadata = self.admin().list_topics(topic, timeout=10).topics.get(topic)
        found = metadata.partitions.get(partition) if metadata is not None else None
        return int(found.leader) if found is not None else -1

    def coordinator(self, group: str, timeout: float = 60.0) -> int:
        """The node that coordinates ``group`` now (it need not exist yet); asked again while
        the coordinator moves or loads (a new cluster's offsets topic, a node just killed)."""
        deadline = time.monotonic() + timeout
        # A client of its own each time: after a roll the kept client's DescribeGroups time
        # out for good (its list_topics still answers).
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        while True:
            future = admin.describe_consumer_groups([group], request_timeout=10)[group]
            try:
                return int(future.result(timeout=15).coordinator.id)
            except KafkaException as exc:
                error = exc.args[0]
                moving = error.retriable() or error.code() in offsets.COORDINATOR_MOVING
                if not moving or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def under_replicated(self) -> list[str]:
        """Every partition, internal topics included, whose in-sync replicas are fewer than
        its replicas (``topic[partition]``)."""
        topics = self.admin().list_topics(timeout=10).topics
        return [
            f"{name}[{p}]"
            for name, topic in topics.items()
            for p, partition in topic.partitions.items()
            if len(partition.isrs) < len(partition.replicas)
        ]

    def wait_in_sync(self, timeout: float = 120.0) -> None:
        """Wait until no partition is under-replicated, as a rolling upgrade waits before it
        restarts the next broker."""
        deadline = time.monotonic() + timeout
        while lagging := self.under_replicated():
            if time.monotonic() > deadline:
                raise TestbedError(
                    f"{len(lagging)} partitions still under-replicated after {timeout:.0f} s "
                    f"(first: {lagging[:5]})"
                )
            time.sleep(0.5)

    def roll(self, down_s: float = 0.0) -> None:
        """A rolling restart: each node in turn bounced cleanly, the next only once every
        partition is in sync again."""
        for node in self.nodes:
            self.bounce(node.node_id, down_s)
            self.wait_in_sync()

    def tool(self, main: str, *args: str, timeout: float = 120.0) -> str:
        """One of Kafka's command-line tools (``org.apache.kafka.tools...``), run against the
        nodes that are up."""
        up = self.running()
        if not up:
            raise TestbedError("no node of the cluster is running")
        bootstrap = ",".join(node.bootstrap for node in up)
        return up[0]._tool(main, "--bootstrap-server", bootstrap, *args, timeout=timeout)

    def elect_preferred_leaders(self, topic: str, partitions: int) -> str:
        """Move each of ``topic``'s partitions' leadership back to its preferred replica."""
        plan = self.workdir / f"elect-{topic}.json"
        asked = [{"topic": topic, "partition": p} for p in range(partitions)]
        plan.write_text(json.dumps({"partitions": asked}))
        return self.tool(
            "org.apache.kafka.tools.LeaderElectionCommand",
            "--election-type",
            "preferred",
            "--path-to-json-file",
            str(plan),
        )

    def reassign(self, topic: str, replicas: dict[int, list[int]], timeout: float = 120.0) -> None:
        """Move ``topic``'s partitions onto ``replicas`` (partition -> node ids, the first
        preferred) with ReassignPartitionsCommand, and wait until the move is complete."""
        plan = self.workdir / f"reassign-{topic}.json"
        plan.write_text(
            json.dumps(
                {
                    "version": 1,
                    "partitions": [
                        {"topic": topic, "partition": p, "replicas": r}
                        for p, r in sorted(replicas.items())
                    ],
                }
            )
        )
        main = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
        self.tool(main, "--reassignment-json-file", str(plan), "--execute")
        deadline = time.monotonic() + timeout
        while True:
            out = self.tool(main, "--reassignment-json-file", str(plan), "--verify")
            if "is still in progress" not in out:
                return
            if time.monotonic() > deadline:
                raise TestbedError(f"the reassignment of {topic} did not end in {timeout:.0f} s")
            time.sleep(1.0)

    def _save(self) -> None:
        state = {"nodes": [str(node.workdir) for node in self.nodes]}
        (self.workdir / "cluster.json").write_text(json.dumps(state))

    @classmethod
    def load(cls, workdir: Path) -> KafkaCluster | None:
        """The cluster whose state ``workdir`` holds, or None if there is none."""
        try:
            folders = json.loads((workdir / "cluster.json").read_text())["nodes"]
            states = [json.loads((Path(f) / "node.json").read_text()) for f in folders]
        except (FileNotFoundError, json.JSONDecodeError, KeyError):
            return None
        return cls(workdir, [ClusterNode(**{**s, "workdir": Path(s["workdir"])}) for s in states])


def start_cluster(workdir: Path, nodes: int = NODES) -> KafkaCluster:
    """A fresh cluster in ``workdir`` (emptied first), started, with share groups enabled."""
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    from tests.infra import pki  # pki imports kafka's names

    pki.broker(workdir / "tls", (PODS_HOST,))  # one CA for every node's TLS listener
    controller_ports = [free_port() for _ in range(nodes)]
    voters = ",".join(f"{i + 1}@{LOOPBACK}:{port}" for i, port in enumerate(controller_ports))
    cluster = KafkaCluster(workdir)
    cluster_id = new_cluster_id()
    for i, controller_port in enumerate(controller_ports):
        folder = workdir / f"node-{i + 1}"
        shutil.copytree(workdir / "tls", folder / "tls")
        node = ClusterNode(
            folder,
            free_port(),
            controller_port,
            sasl_port=free_port(),
            pods_port=free_port(),
            pods_ssl_port=free_port(),
            node_id=i + 1,
            cluster_id=cluster_id,
            voters=voters,
        )
        folder.mkdir(parents=True, exist_ok=True)
        node._save_state()
        cluster.nodes.append(node)
    try:
        cluster.start()
        cluster.nodes[0].ensure_share_groups()
    except BaseException:
        cluster.stop()
        raise
    return cluster


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.infra.kafka_cluster",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", choices=["up", "down", "status"])
    args = parser.parse_args(argv)
    try:
        cluster = KafkaCluster.load(DEV_CLUSTER)
        up = cluster.running() if cluster is not None else []
        if args.command == "status":
            if cluster is not None and len(up) == len(cluster.nodes):
                print(cluster.bootstrap)
                return 0
            print(
                f"the development cluster is not running ({len(up)} nodes up; "
                "make kafka-cluster-up)",
                file=sys.stderr,
            )
            return 1
        if args.command == "down":
            if cluster is not None:
                cluster.stop()
                print(f"stopped the development cluster {cluster.bootstrap}", file=sys.stderr)
            return 0
        started = time.monotonic()
        if cluster is not None and up:
            cluster.start()  # a node a test left down comes back
        else:
            cluster = start_cluster(DEV_CLUSTER)
        print(
            f"a Kafka cluster of {len(cluster.nodes)} nodes is up on {cluster.bootstrap} "
            f"({time.monotonic() - started:.1f} s); logs: {DEV_CLUSTER}/node-*/broker.log",
            file=sys.stderr,
        )
        print(cluster.bootstrap)
        return 0
    except TestbedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
