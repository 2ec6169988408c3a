"""B9's topics on the test broker, read by one group each or shared by several, each group's
offsets at the log end, the lag step, and deleting them again, each timed.

Owns: creating N topics of 8 partitions in chunks and waiting until every partition has a
leader (creation is acknowledged before the broker has made the logs); no more than the
broker's open-file limit and ``vm.max_map_count`` leave room for (``room``), and if the
broker refuses more, the topics it holds so far are the run's; which groups read which topic
(``share``: a topic's own name for its one group, else ``<topic>-<k>``); a few records per
partition and each group's committed offsets at its topic's log end (one
``alter_consumer_group_offsets`` per group, all at once), so every group starts at lag 0; the
step (records into some topics, timed at the producer's flush); deleting the topics, timed until
the metadata no longer shows them and until the broker has closed their files.

Does not own the groups in Kubernetes or any measurement of the scalers (``b9_fleet_scale.py``).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

PARTITIONS = 8
CHUNK = 100  # topics per CreateTopics / DeleteTopics request
RECORDS_PER_PARTITION = 3
# What a partition with records costs the broker, measured here: its open segment (one fd) and
# its two memory-mapped indexes. Past its open-file limit the broker fails its log directory
# and stops; past vm.max_map_count it cannot map indexes.
FDS_PER_PARTITION, MAPS_PER_PARTITION, MARGIN = 1, 2, 500
COMMIT_TIMEOUT_S = 120  # groups committed again while the broker says its coordinator is not ready


def room(pid: int) -> tuple[int, str]:
    """How many more partitions the broker ``pid`` holds, and what limits it."""
    limits = Path(f"/proc/{pid}/limits").read_text()
    found = re.search(r"^Max open files\s+(\S+)", limits, re.M)
    soft = 1 << 30 if found is None or found[1] == "unlimited" else int(found[1])
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    maps = len(Path(f"/proc/{pid}/maps").read_text().splitlines())
    max_maps = int(Path("/proc/sys/vm/max_map_count").read_text())
    by_fds = (soft - fds - MARGIN) // FDS_PER_PARTITION
    by_maps = (max_maps - maps - MARGIN) // MAPS_PER_PARTITION
    if by_fds <= by_maps:
        return by_fds, f"its open-file limit {soft:,} ({fds:,} open)"
    return by_maps, f"vm.max_map_count {max_maps:,} ({maps:,} mapped)"


def _open_files(pid: int, prefix: str) -> int:
    """How many files the broker holds open in the folders of topics named ``prefix-*``."""
    found = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            found += f"/{prefix}-" in os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
    return found


@dataclass
class Topics:
    """The run's topics on the broker ``broker_pid`` serves, and the groups reading them."""

    bootstrap: str
    broker_pid: int
    names: list[str] = field(default_factory=list)
    created_s: float = 0.0
    refused: str = ""  # why the broker took no more, if it stopped short
    prefix: str = ""
    groups: dict[str, str] = field(default_factory=dict)  # group id -> its topic; none: a
    # topic's name is its one group's id

    @cached_property
    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap})

    def create(self, prefix: str, count: int, timeout_s: float = 600) -> None:
        """Create ``count`` topics (fewer if the broker has no room or refuses), and wait until
        every partition has a leader."""
        admin, started, self.prefix = self.admin, time.monotonic(), prefix
        partitions, limit = room(self.broker_pid)
        if partitions < count * PARTITIONS:
            count = max(0, partitions // PARTITIONS)
            self.refused = f"{limit} leaves room for {partitions:,} partitions"
        wanted, failed = [f"{prefix}-{i:04d}" for i in range(count)], ""
        for i in range(0, count, CHUNK):
            chunk = [NewTopic(n, PARTITIONS, 1) for n in wanted[i : i + CHUNK]]
            for name, future in admin.create_topics(chunk, request_timeout=120).items():
                try:
                    future.result(120)
                    self.names.append(name)
                except KafkaException as exc:
                    failed = f"{name}: {exc.args[0].str()}"
            if failed:
                self.refused = failed
                break
        deadline = time.monotonic() + timeout_s
        while (ready := self._led(admin)) < len(self.names) * PARTITIONS:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{ready} of {len(self.names) * PARTITIONS} partitions led")
            time.sleep(1)
        self.created_s = time.monotonic() - started

    def _led(self, admin: AdminClient) -> int:
        topics = admin.list_topics(timeout=60).topics
        return sum(
            1
            for name in self.names
            if name in topics
            for p in topics[name].partitions.values()
            if p.leader >= 0 and p.error is None
        )

    def produce(self, names: list[str], per_partition: int) -> float:
        """``per_partition`` records of 100 bytes into each partition of ``names``; the
        monotonic time at which the last was acknowledged."""
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 20})
        failed: list[str] = []

        def delivered(err: object, _: object) -> None:
            if err is not None:
                failed.append(str(err))

        for name in names:
            for n in range(per_partition * PARTITIONS):
                producer.produce(name, b"x" * 100, partition=n % PARTITIONS, on_delivery=delivered)
                producer.poll(0)
        if producer.flush(120) or failed:
            raise RuntimeError(f"records not delivered: {failed[:3]}")
        return time.monotonic()

    def share(self, per_topic: int, count: int) -> None:
        """``count`` groups (fewer if there are fewer topics), ``per_topic`` on each topic."""
        pairs = [
            (name if per_topic == 1 else f"{name}-{k}", name)
            for name in self.names
            for k in range(per_topic)
        ]
        self.groups = dict(pairs[:count])

    def fill(self) -> None:
        self.produce(self.names, RECORDS_PER_PARTITION)
        self.commit_at_end(list(self.groups) or self.names)

    def commit_at_end(self, names: list[str]) -> None:
        """Each group's offsets (``names``: group ids) at its topic's log end: lag 0."""
        admin, topic = self.admin, {g: self.groups.get(g, g) for g in names}
        wanted = {
            TopicPartition(t, p): OffsetSpec.latest()
            for t in set(topic.values())
            for p in range(PARTITIONS)
        }
        ends = {tp: f.result(60).offset for tp, f in admin.list_offsets(wanted).items()}
        # A partition's error is in the result, not raised: on a fresh broker, while
        # __consumer_offsets is made and loaded, many say NOT_COORDINATOR or
        # COORDINATOR_LOAD_IN_PROGRESS and commit nothing. Those groups are committed again.
        todo, deadline = list(names), time.monotonic() + COMMIT_TIMEOUT_S
        while todo:
            futures = {
                name: future
                for name in todo
                for future in admin.alter_consumer_group_offsets(
                    [ConsumerGroupTopicPartitions(name, [
                        TopicPartition(topic[name], p, ends[TopicPartition(topic[name], p)])
                        for p in range(PARTITIONS)
                    ])]
                ).values()
            }  # fmt: skip
            failed = {
                name: str(tp.error)
                for name, future in futures.items()
                for tp in future.result(60).topic_partitions
                if tp.error is not None
            }
            if failed and time.monotonic() > deadline:
                raise RuntimeError(f"{len(failed)} groups not committed: {failed}"[:500])
            todo = list(failed)
            time.sleep(1 if todo else 0)

    def delete(self, timeout_s: float = 600) -> tuple[float, float]:
        """Delete the topics; seconds until the metadata no longer lists them, and until the
        broker has closed their files (it deletes them a minute later: file.delete.delay.ms)."""
        admin, started = self.admin, time.monotonic()
        for i in range(0, len(self.names), CHUNK):
            for future in admin.delete_topics(self.names[i : i + CHUNK]).values():
                future.result(120)
        deadline = started + timeout_s
        while set(self.names) & set(admin.list_topics(timeout=60).topics):
            if time.monotonic() > deadline:
                raise RuntimeError("deleted topics still listed")
            time.sleep(0.5)
        unlisted = time.monotonic() - started
        while _open_files(self.broker_pid, self.prefix) and time.monotonic() < deadline:
            time.sleep(1)
        return unlisted, time.monotonic() - started
