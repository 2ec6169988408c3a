"""Consumer groups' committed offsets: where the operator was given Kafka's Java client, every
group of a read is asked in one call (one FindCoordinator, one OffsetFetch per coordinator),
and reads exactly what librdkafka's one group a request reads; without it, one group a request
as before and no JVM; a group Java's admin cannot read, or that it answers without a partition
asked, fails alone and is never a smaller lag."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable
from typing import Any

import jpype
import pytest
from confluent_kafka import KafkaError

from kafleet.config.security import Security
from kafleet.share import jvm
from kafleet_operator.reading import clusters, committed, java_admin, lag_reader, snapshots
from tests.conftest import TopicFactory
from tests.infra.offsets import commit
from tests.infra.records import ProduceReport


@pytest.fixture
def fleet(
    kafka: str,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    group_id: Callable[[], str],
) -> list[snapshots.Want]:
    """Six groups on two topics of three partitions (30 records each): committed everywhere,
    on some partitions only, or nowhere; asked every read (no worker runs)."""
    wants = []
    for topic in (topic_factory(partitions=3), topic_factory(partitions=3)):
        for partition in range(3):
            produce(topic, 10, partition=partition)
        for offsets in ({0: 10, 1: 10, 2: 10}, {0: 4}, {}):
            group = group_id()
            if offsets:
                commit(kafka, group, topic, offsets)
            wants.append(snapshots.Want(group, (topic,), may_settle=False))
    return wants


def test_every_groups_offsets_are_read_in_one_call_where_the_java_client_runs(
    kafka: str, share_classpath: str, fleet: list[snapshots.Want]
) -> None:
    java = clusters.View(kafka, Security(), share_classpath)
    librdkafka = clusters.View(kafka, Security())

    try:
        by_java = java.read(fleet)
        by_java_again = java.read(fleet)
        one_by_one = librdkafka.read(fleet)
    finally:
        java.java.close()

    assert (java.committed.way, java.committed.calls) == ("java", 2)  # one call a read
    assert (librdkafka.committed.way, librdkafka.committed.calls) == ("librdkafka", 6)
    assert by_java.committed == by_java_again.committed == one_by_one.committed
    first = fleet[0].topics[0]
    assert by_java.committed[fleet[1].group_id] == {
        (first, 0): 4,
        (first, 1): None,  # nothing committed there: from the log start, not 0
        (first, 2): None,
    }
    lags = [lag_reader.lag_of(by_java, want).total for want in fleet]
    assert lags == [0, 26, 30] * 2


def test_a_standbys_read_of_no_group_asks_only_the_metadata(
    kafka: str, share_classpath: str, fleet: list[snapshots.Want]
) -> None:
    """What keeps a cluster warm for a pod that may come to lead its groups: its topics, no
    offsets asked, and no Java admin made (about 90 MB: the first read as a leader makes it)."""
    view = clusters.View(kafka, Security(), share_classpath)
    warm = view.read([])

    assert set(fleet[0].topics) <= set(warm.topics)
    assert not warm.ends
    assert not warm.committed
    assert view.committed.calls == 0
    assert view.java._admin is None


def test_without_the_java_client_each_group_is_asked_alone_and_no_jvm_starts(
    kafka: str, fleet: list[snapshots.Want], monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[object] = []
    monkeypatch.setattr(jpype, "startJVM", lambda *a, **k: started.append((a, k)))
    views = [
        clusters.View(kafka, Security()),
        clusters.View(kafka, Security(), "/nonexistent/*"),  # no kafka-clients jar there
    ]

    readings = [view.read(fleet) for view in views]

    for view, reading in zip(views, readings, strict=True):
        assert (view.committed.way, view.committed.calls) == ("librdkafka", len(fleet))
        assert [lag_reader.lag_of(reading, want).total for want in fleet] == [0, 26, 30] * 2
    assert started == []


class Entry:
    """A ``Map.Entry<TopicPartition, OffsetAndMetadata>`` as Java's admin answers it."""

    def __init__(self, topic: str, partition: int, offset: int | None) -> None:
        self._topic, self._partition, self._offset = topic, partition, offset

    def getKey(self) -> Any:  # noqa: N802 (Java's names)
        return self

    def getValue(self) -> Any:  # noqa: N802
        return None if self._offset is None else self

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int | None:
        return self._offset


class Answer:
    def __init__(self, *entries: Entry) -> None:
        self.entries = entries

    def entrySet(self) -> tuple[Entry, ...]:  # noqa: N802
        return self.entries


ASKED = [("orders", 0), ("orders", 1)]


def test_javas_null_is_no_commit_and_a_partition_left_out_is_a_failure() -> None:
    """Java's admin leaves out a partition answered with an error ("Skipping return offset"):
    taken as no commit, it would read as 0 with scale_to_zero_on_invalid_offset."""
    read = committed.java_offsets_of(ASKED, Answer(Entry("orders", 0, 7), Entry("orders", 1, None)))
    left_out = committed.java_offsets_of(ASKED, Answer(Entry("orders", 0, 7)))

    assert read == {("orders", 0): 7, ("orders", 1): None}
    assert left_out == snapshots.Failure(
        KafkaError._BAD_MSG, "no committed offset answered for orders[1]"
    )


class Future:
    def __init__(self, answer: Any = None, error: Exception | None = None, done: bool = True):
        self.answer, self.error, self.done = answer, error, done
        self.waited: list[int] = []

    def isDone(self) -> bool:  # noqa: N802
        return self.done

    def get(self, timeout: int, unit: Any) -> Any:
        self.waited.append(timeout)
        if self.error is not None:
            raise self.error
        return self.answer


class Client:
    """Java's ``Admin`` answering each group's future as given; counts its calls."""

    def __init__(self, futures: dict[str, Future]) -> None:
        self.futures = futures
        self.calls: list[Any] = []

    def listConsumerGroupOffsets(self, specs: Any, options: Any) -> Any:  # noqa: N802
        self.calls.append(specs)
        return self

    def partitionsToOffsetAndMetadata(self, group: str) -> Future:  # noqa: N802
        return self.futures[group]


def java_exception(name: str, message: str) -> Exception:
    cause = jpype.JClass(name)(message)
    error = jpype.JClass("java.util.concurrent.ExecutionException")(cause)
    assert isinstance(error, Exception)
    return error


def test_a_group_javas_admin_cannot_read_fails_alone_with_kafkas_words(
    share_classpath: str,
) -> None:
    jvm.start(share_classpath, java_admin.JVM_OPTIONS)
    denied = "org.apache.kafka.common.errors.GroupAuthorizationException"
    client = Client(
        {
            "billing": Future(Answer(Entry("orders", 0, 7), Entry("orders", 1, 3))),
            "refunds": Future(error=java_exception(denied, "Not authorized to access group")),
        }
    )
    offsets = committed.CommittedOffsets(None, java_admin.JavaAdmin("", Security(), None))  # type: ignore[arg-type]

    found = offsets._java(client, {"billing": ASKED, "refunds": ASKED}, time.monotonic() + 5)

    assert len(client.calls) == 1
    assert found["billing"] == {("orders", 0): 7, ("orders", 1): 3}
    assert found["refunds"] == snapshots.Failure(
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        "GroupAuthorizationException: Not authorized to access group",
    )


def test_a_group_not_answered_by_the_deadline_is_not_waited_for(share_classpath: str) -> None:
    """Each group waited at least 100 ms once the deadline had passed: 20 s for 200 groups."""
    jvm.start(share_classpath, java_admin.JVM_OPTIONS)
    late = [Future(done=False) for _ in range(3)]
    client = Client({f"g{n}": future for n, future in enumerate(late)})
    offsets = committed.CommittedOffsets(None, java_admin.JavaAdmin("", Security(), None))  # type: ignore[arg-type]

    found = offsets._java(client, {f"g{n}": ASKED for n in range(3)}, time.monotonic() - 1)

    assert all(
        failure == snapshots.Failure(KafkaError._TIMED_OUT, "no committed offsets in time")
        for failure in found.values()
    )
    assert [future.waited for future in late] == [[], [], []]


class Librdkafka:
    """librdkafka's admin where no coordinator answers in time: counts the groups asked."""

    def __init__(self) -> None:
        self.asked = 0

    def list_consumer_group_offsets(self, request: list[Any], **_: Any) -> dict[str, Any]:
        self.asked += 1
        pending: concurrent.futures.Future[Any] = concurrent.futures.Future()
        return {request[0].group_id: pending}


def test_a_java_admin_that_answers_no_group_is_left_alone_for_a_while(
    share_classpath: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Java's admin connects with properties of its own: where it cannot (a setting it maps
    otherwise than librdkafka), every group's lag would stay unknown at every read."""
    jvm.start(share_classpath, java_admin.JVM_OPTIONS)
    timeout = "org.apache.kafka.common.errors.TimeoutException"
    client = Client({"billing": Future(error=java_exception(timeout, "Timed out"))})
    java = java_admin.JavaAdmin("", Security(), share_classpath)
    monkeypatch.setattr(java, "client", lambda: client)
    librdkafka = Librdkafka()
    offsets = committed.CommittedOffsets(librdkafka, java)  # type: ignore[arg-type]
    asked = {"billing": ASKED}

    failed = offsets.read(asked, time.monotonic() + 5)
    next_read = offsets.read(asked, time.monotonic() + 0.3)
    way_then = offsets.way
    monkeypatch.setattr(time, "monotonic", lambda: time.perf_counter() + committed.JAVA_OFF_S + 1e6)
    offsets.read(asked, time.monotonic() + 5)

    assert failed["billing"] == snapshots.Failure(
        KafkaError._TIMED_OUT, "TimeoutException: Timed out"
    )
    assert isinstance(next_read["billing"], snapshots.Failure)  # unknown, never a smaller lag
    assert way_then == "librdkafka"
    assert librdkafka.asked == 1
    assert offsets.way == "java"  # asked again after JAVA_OFF_S
    assert len(client.calls) == 2


def test_a_java_admins_first_call_is_given_its_own_time_whatever_the_read_has_left(
    share_classpath: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first call loads Kafka's admin classes and connects: on a busy machine the rest of
    a read's deadline was not enough (CI), and a cold client was taken for one that cannot
    connect and left for JAVA_OFF_S. Once it has answered, a call has what the read left."""
    jvm.start(share_classpath, java_admin.JVM_OPTIONS)
    pending = Future(Answer(Entry("orders", 0, 7), Entry("orders", 1, 3)), done=False)
    java = java_admin.JavaAdmin("", Security(), share_classpath)
    monkeypatch.setattr(java, "client", lambda: Client({"billing": pending}))
    offsets = committed.CommittedOffsets(Librdkafka(), java)  # type: ignore[arg-type]

    first = offsets.read({"billing": ASKED}, time.monotonic() + 0.05)
    second = offsets.read({"billing": ASKED}, time.monotonic() + 0.05)

    assert first["billing"] == {("orders", 0): 7, ("orders", 1): 3}
    assert pending.waited[0] > 0.9 * committed.FIRST_CALL_S * 1000  # milliseconds
    assert second["billing"] == first["billing"]
    assert pending.waited[1] <= 50


def test_a_java_admin_that_answered_before_is_asked_again_when_a_read_fails_every_group(
    share_classpath: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A coordinator that dies fails its groups, not the client: asking them one by one of
    librdkafka then is what crashes its admin (librdkafka#5040)."""
    jvm.start(share_classpath, java_admin.JVM_OPTIONS)
    timeout = "org.apache.kafka.common.errors.TimeoutException"
    client = Client({"billing": Future(Answer(Entry("orders", 0, 7), Entry("orders", 1, 3)))})
    java = java_admin.JavaAdmin("", Security(), share_classpath)
    monkeypatch.setattr(java, "client", lambda: client)
    librdkafka = Librdkafka()
    offsets = committed.CommittedOffsets(librdkafka, java)  # type: ignore[arg-type]
    offsets.read({"billing": ASKED}, time.monotonic() + 5)
    client.futures["billing"] = Future(error=java_exception(timeout, "Timed out"))

    failed = offsets.read({"billing": ASKED}, time.monotonic() + 5)
    offsets.read({"billing": ASKED}, time.monotonic() + 5)

    assert isinstance(failed["billing"], snapshots.Failure)
    assert (offsets.way, len(client.calls), librdkafka.asked) == ("java", 3, 0)
