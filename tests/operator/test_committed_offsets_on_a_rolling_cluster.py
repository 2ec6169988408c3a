"""Committed offsets read through Kafka's Java admin, on three brokers while the coordinator of
a group dies: the group's lag is unknown while its coordinator is dead, never a smaller
figure; another group, coordinated elsewhere, is read exactly in the same reads; and the exact
lag is read again within a pass of the coordinator moving, still one call a read. The same
with librdkafka's one group a request: ``test_lag_on_a_rolling_cluster.py``."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import KafkaException

from kafleet.config.security import Security
from kafleet_operator.reading import clusters, lag_reader, snapshots
from tests.infra.kafka_cluster import KafkaCluster
from tests.operator.conftest import LaggingGroup
from tests.operator.test_lag_on_a_rolling_cluster import MOVE_S, PASS_S, READ_EVERY_S, Watch


def lags(view: clusters.View, wants: list[snapshots.Want]) -> list[int | None]:
    """Each group's lag in one read of the view, None where it is unknown."""
    try:
        snapshot = view.read(wants)
    except KafkaException:  # the cluster's read failed: every group unknown
        return [None] * len(wants)
    found: list[int | None] = []
    for want in wants:
        try:
            found.append(lag_reader.lag_of(snapshot, want).total)
        except (lag_reader.LagUnreadableError, KafkaException):
            found.append(None)
    return found


def test_a_dead_coordinators_groups_are_unknown_and_the_others_exact_in_one_call_a_read(
    cluster_intact: KafkaCluster,
    lagging_group: Callable[..., LaggingGroup],
    share_classpath: str,
) -> None:
    groups = [lagging_group(1) for _ in range(8)]
    watches = [Watch(cluster_intact, group) for group in groups]
    coordinators = [watch.coordinator() for watch in watches]
    dead = coordinators[0]
    # Coordinated and led elsewhere: nothing of theirs is on the dead broker.
    untouched = [
        n
        for n, watch in enumerate(watches)
        if coordinators[n] != dead and dead not in watch.leaders().values()
    ]
    wants = [snapshots.Want(g.group, (g.topic,), may_settle=False) for g in groups]
    exact = [g.lag for g in groups]
    view = clusters.View(cluster_intact.bootstrap, Security(), share_classpath)

    try:
        before = lags(view, wants)
        cluster_intact.kill(dead)
        killed = time.monotonic()
        readings: list[list[int | None]] = []
        while watches[0].coordinator() == dead:
            assert time.monotonic() - killed < MOVE_S, f"broker {dead} still coordinates"
            readings.append(lags(view, wants))
            time.sleep(READ_EVERY_S)
        moved = time.monotonic()
        while (last := lags(view, wants)) != exact:
            readings.append(last)
            assert time.monotonic() - moved < PASS_S * 2, f"not exact again: {last}"
            time.sleep(READ_EVERY_S)
    finally:
        view.java.close()

    print(f"broker {dead} killed; coordinators {coordinators}; moved after {moved - killed:.1f} s")
    print(f"untouched groups: {untouched}")
    print("\n".join(str(r) for r in readings))
    assert before == exact
    assert readings, "the coordinator moved before the first read"
    for reading in readings:
        assert all(lag in (None, lag_of) for lag, lag_of in zip(reading, exact, strict=True))
        assert reading[0] is None or reading[0] == exact[0]  # unknown, never less
        assert all(reading[n] == exact[n] for n in untouched)  # the others' reads go on
    assert view.committed.way == "java"
    assert view.committed.calls <= 2 + len(readings)  # one a read (none where the read failed)
