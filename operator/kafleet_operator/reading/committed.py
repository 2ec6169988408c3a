"""Consumer groups' committed offsets: many groups a request where the Java admin runs.

Owns: reading the committed offsets of every group a read asks (``CommittedOffsets.read``),
one of two ways, chosen once per reading process:

- through the cluster's Java admin (``java_admin.py``), when the operator was given Kafka's
  Java client (``KAFLEET_SHARE__CLASSPATH``) and its JVM runs: every group in one
  ``listConsumerGroupOffsets`` call, which sends one FindCoordinator for all of them (KIP-699)
  and one OffsetFetch per coordinator (KIP-709), where librdkafka sends both for each group;
  Java's admin looks a coordinator up again and asks again while one moves or loads, until
  the read's deadline;
- else through librdkafka's admin (``list_consumer_group_offsets``, one group per request as
  it allows, all in flight together), asking again while a coordinator moves or loads. A
  Java call that raises before it sends anything (a defect, not Kafka's answer) is asked this
  way too, for that read; and where Java's admin has not answered one group yet in this
  process and a read's every group fails (timed out, refused: it connects with the Java
  client's properties, while librdkafka's connection answered the same read's log ends), the
  next reads go this way for ``JAVA_OFF_S``, then try Java again, so a connection only
  librdkafka can make costs one read, not every read. One that has answered before keeps
  being asked: a coordinator dying fails its groups, not the client.

Either way the same answer (``offsets_of``, ``java_offsets_of``): each partition's committed
offset, None where the group has committed nothing there, or a ``Failure`` for the whole group
when its request failed or an asked partition was answered with an error or not at all (Java's
admin leaves such a partition out; librdkafka marks it): taken as no commit, it would count as
0 with ``scale_to_zero_on_invalid_offset``, a smaller lag and not an unknown one. One group's
failure is that group's alone.

Nothing is cached here: a coordinator is looked up at each read (once for all groups, or per
group), so a coordinator that moved is never asked from memory.

Does not own which groups are asked (``clusters.py``: those not settled) or what the offsets
mean (``lag_reader.py``).
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from kafleet.share import jvm
from kafleet_operator.reading import java_admin
from kafleet_operator.reading.snapshots import TP, Failure

log = logging.getLogger("kafleet.operator")
RETRY_S = 0.2
COORDINATOR_MOVING = {
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
}
Found = dict[TP, int | None] | Failure
JAVA_OFF_S = 600.0  # Java's admin never answered a group: librdkafka's way this long
FIRST_CALL_S = 10.0  # until Java's admin has answered once, each call's time at least
# Codes of one group's own refusal, not of the connection: Java answered for the cluster.
GROUPS_OWN = {KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError._BAD_MSG}


class CommittedOffsets:
    """One cluster connection's way to the committed offsets: ``admin`` is its librdkafka
    admin client, ``java`` its Java admin, tried at the first read."""

    def __init__(self, admin: AdminClient, java: java_admin.JavaAdmin) -> None:
        self.admin, self.java = admin, java
        self.way = ""  # "java" or "librdkafka": how the last read went
        self.calls = 0  # calls made (one a read through Java, one a group through librdkafka)
        self._no_java = False  # this process has no Java admin (said once)
        self._java_off_until = 0.0  # Java's admin answered nothing: not asked before this
        self._java_answered = False  # Java's admin answered a group in this process

    def read(self, watched: dict[str, list[TP]], deadline: float) -> dict[str, Found]:
        """Each group's committed offsets, or its ``Failure``, by ``deadline``."""
        if not watched:
            return {}
        client = self._java_client()
        if client is None:
            self.way = "librdkafka"
            return self._librdkafka(watched, deadline)
        self.way = "java"
        import jpype

        java_deadline = deadline
        if not self._java_answered:  # its first calls: class loading and connecting are
            # not the cluster's answer; a cold JVM beside a busy pass was timed out in the rest
            # of the read's deadline, and Java's way was then left for JAVA_OFF_S. Never past
            # FIRST_CALL_S after the read's deadline: the operator stops waiting for a reading
            # process's answer a little later (``readers.ANSWER_S``) and replaces it.
            wanted = time.monotonic() + FIRST_CALL_S
            java_deadline = max(deadline, min(wanted, deadline + FIRST_CALL_S))
        try:
            found = self._java(client, watched, java_deadline)
        except jpype.JException as exc:
            log.warning("the Java admin refused the committed offsets' call: %s", exc)
            self.way = "librdkafka"
            return self._librdkafka(watched, deadline)
        failures = [f for f in found.values() if isinstance(f, Failure)]
        self._java_answered |= len(failures) < len(found)
        self._java_answered |= any(f.code in GROUPS_OWN for f in failures)  # Kafka's answer too
        if not self._java_answered:  # not one group answered, ever
            self._java_off_until = time.monotonic() + JAVA_OFF_S
            log.warning(
                "the Java admin of %s answered no group (%s): one group a request for %.0f s",
                self.java.bootstrap,
                failures[0].text,
                JAVA_OFF_S,
            )
        return found

    def _java_client(self) -> Any:
        """The Java admin to ask this read; None where this process has none, or where it
        answered no group lately."""
        if self._no_java or time.monotonic() < self._java_off_until:
            return None
        client = self.java.client()
        if isinstance(client, java_admin.Unavailable):
            self._no_java = True
            said = log.info if self.java.classpath else log.debug
            said(
                "committed offsets of %s: one group a request (%s)", self.java.bootstrap, client.why
            )
            return None
        return client

    def _java(self, client: Any, watched: dict[str, list[TP]], deadline: float) -> dict[str, Found]:
        import jpype

        java = jvm.java
        partition = java("org.apache.kafka.common.TopicPartition")
        spec = java("org.apache.kafka.clients.admin.ListConsumerGroupOffsetsSpec")
        specs = java("java.util.HashMap")()
        for group, tps in watched.items():
            asked = java("java.util.ArrayList")()
            for topic, p in tps:
                asked.add(partition(topic, p))
            specs.put(group, spec().topicPartitions(asked))
        options = java("org.apache.kafka.clients.admin.ListConsumerGroupOffsetsOptions")()
        options.timeoutMs(jpype.JInt(max(100, int((deadline - time.monotonic()) * 1000))))
        self.calls += 1
        result = client.listConsumerGroupOffsets(specs, options)
        millis = java("java.util.concurrent.TimeUnit").MILLISECONDS
        found: dict[str, Found] = {}
        for group, tps in watched.items():
            future = result.partitionsToOffsetAndMetadata(group)
            left = int((deadline - time.monotonic()) * 1000)
            if left <= 0 and not future.isDone():  # the call's own timeout is about to end it
                found[group] = Failure(KafkaError._TIMED_OUT, "no committed offsets in time")
                continue
            try:
                answer = future.get(max(1, left), millis)
            except jpype.JException as exc:
                found[group] = Failure(*java_admin.error(exc))
                continue
            found[group] = java_offsets_of(tps, answer)
        return found

    def _librdkafka(self, watched: dict[str, list[TP]], deadline: float) -> dict[str, Found]:
        """Every group in flight together; a group whose coordinator moves or loads is asked
        again until the deadline."""
        found: dict[str, Found] = {}
        pending = dict(watched)
        while pending:
            futures = {group: self._ask(group, tps, deadline) for group, tps in pending.items()}
            pending = {}
            for group, future in futures.items():
                try:
                    answer = future.result(timeout=max(0.1, deadline - time.monotonic()))
                except concurrent.futures.TimeoutError:
                    found[group] = Failure(KafkaError._TIMED_OUT, "no committed offsets in time")
                    continue
                except KafkaException as exc:
                    code = exc.args[0].code() if exc.args else None
                    if code in COORDINATOR_MOVING and time.monotonic() + RETRY_S < deadline:
                        pending[group] = watched[group]
                    found[group] = Failure.of(exc)
                    continue
                found[group] = offsets_of(watched[group], answer.topic_partitions)
            if pending:
                time.sleep(RETRY_S)
        return found

    def _ask(self, group: str, tps: list[TP], deadline: float) -> concurrent.futures.Future[Any]:
        self.calls += 1
        request = [ConsumerGroupTopicPartitions(group, [TopicPartition(t, p) for t, p in tps])]
        timeout = max(0.1, deadline - time.monotonic())
        return self.admin.list_consumer_group_offsets(request, request_timeout=timeout)[group]


def offsets_of(asked: list[TP], answer: list[TopicPartition] | None) -> Found:
    """A group's committed offsets as librdkafka answered them (None: no commit there), or the
    failure of the first partition answered with an error or not answered at all."""
    found: dict[TP, int | None] = {}
    for tp in answer or []:
        if tp.error is not None:
            return Failure.of(KafkaException(tp.error))
        found[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else None
    return _all_answered(asked, found)


def java_offsets_of(asked: list[TP], answer: Any) -> Found:
    """A group's committed offsets as Java's admin answered them (a ``Map<TopicPartition,
    OffsetAndMetadata>``: null where nothing was committed; a partition answered with an error
    left out), or the failure of the first partition not answered."""
    found: dict[TP, int | None] = {}
    for entry in answer.entrySet():
        tp, committed = entry.getKey(), entry.getValue()
        offset = None if committed is None else int(committed.offset())
        found[(str(tp.topic()), int(tp.partition()))] = (
            offset if offset is not None and offset >= 0 else None
        )
    return _all_answered(asked, found)


def _all_answered(asked: list[TP], found: dict[TP, int | None]) -> Found:
    for t, p in asked:
        if (t, p) not in found:
            return Failure(KafkaError._BAD_MSG, f"no committed offset answered for {t}[{p}]")
    return found
