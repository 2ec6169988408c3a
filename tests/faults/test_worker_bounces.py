"""Workers restarted while records flow (Kafka's ``test_consumer_bounce`` and
``test_static_consumer_bounce``): a deploy rolls them one at a time, a node loss takes them all.

A clean bounce (SIGTERM: drain, commit, leave) must hand over with nothing handled twice; a
hard one (SIGKILL) must lose nothing, whatever it repeats. Static members (``group_instance_id``,
as the operator sets it to the pod's name) that come back within the session timeout get their
own partitions back, and the members that stayed see no revoke.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from kafleet.engine import static_rejoin
from tests.faults.conftest import Fleet, FleetFactory
from tests.faults.delivery import SteadyProducer
from tests.faults.test_broker_roll import PARTITIONS, protocol_flags, wait_committed_to_end
from tests.infra.kafka_cluster import KafkaCluster
from tests.infra.waiting import wait_until

NAMES = ("a", "b", "c")
SESSION_S = 30  # the cluster's KIP-848 session, and protocol_flags' classic one


def bounce(workers: Fleet, names: tuple[str, ...], how: str, flags: list[str]) -> None:
    """Stop ``names`` (SIGTERM, each must exit 0; or SIGKILL), then start them again."""
    for name in names:
        if how == "clean":
            assert workers.stop(name) == 0, workers.log(name)[-3000:]
        else:
            workers.kill(name)
    for name in names:
        workers.start(name, *flags)


# Each way of bouncing once, each protocol at least twice: a hard bounce costs a session
# timeout (30 s) per worker killed, and the whole matrix runs beside the other tests.
@pytest.mark.timeout(600)  # a fault and its recovery, slower on a busy machine
@pytest.mark.parametrize(
    ("mode", "how", "protocol"),
    [
        ("rolling", "clean", "classic"),
        ("rolling", "clean", "consumer"),
        ("all-at-once", "clean", "consumer"),
        ("rolling", "hard", "classic"),
        ("all-at-once", "hard", "consumer"),
    ],
)
def test_bounced_workers_lose_nothing_and_clean_bounces_repeat_nothing(
    mode: str,
    how: str,
    protocol: str,
    cluster_intact: KafkaCluster,
    cluster_topic: Callable[[int], str],
    fleet: FleetFactory,
) -> None:
    cluster = cluster_intact
    topic = cluster_topic(PARTITIONS)
    workers = fleet(topic)
    flags = protocol_flags(protocol)
    for name in NAMES:
        workers.start(name, *flags)
    workers.wait_assigned(PARTITIONS)

    with SteadyProducer(cluster.bootstrap, topic, rate=200) as producer:
        time.sleep(3)
        started = time.time()
        # A clean bounce costs a rebalance, a hard one a session timeout (30 s): two rounds
        # of the first, one of the second.
        for _ in range(2 if how == "clean" else 1):
            groups = [(name,) for name in NAMES] if mode == "rolling" else [NAMES]
            for names in groups:
                bounce(workers, names, how, flags)
                workers.wait_assigned(PARTITIONS, timeout=90)
        ended = time.time()
        time.sleep(3)
    wait_committed_to_end(cluster.bootstrap, workers.group, topic)
    assert workers.stop_all() == dict.fromkeys(NAMES, 0)

    delivery = workers.delivery(producer)
    print(f"\n{protocol}, {how} {mode}: {delivery.summary(started, ended)}")
    assert not delivery.lost, f"lost {len(delivery.lost)} records, first {delivery.lost[:5]}"
    if how == "clean":
        assert delivery.duplicates == 0, "a clean bounce handed a record to two workers"


@pytest.mark.timeout(600)  # a fault and its recovery, slower on a busy machine
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
@pytest.mark.parametrize("how", ["clean", "hard"])
def test_a_bounced_static_member_takes_its_own_partitions_back_and_revokes_no_other(
    how: str,
    protocol: str,
    cluster_intact: KafkaCluster,
    cluster_topic: Callable[[int], str],
    fleet: FleetFactory,
) -> None:
    cluster = cluster_intact
    topic = cluster_topic(PARTITIONS)
    workers = fleet(topic)

    def flags(name: str) -> list[str]:
        return [*protocol_flags(protocol), "--group-instance-id", f"{workers.group}-{name}"]

    for name in NAMES:
        workers.start(name, *flags(name))
    workers.wait_assigned(PARTITIONS)
    held = {name: sorted(workers.assigned(name)) for name in NAMES}
    before = {name: workers.counters(name) for name in ("a", "b")}

    with SteadyProducer(cluster.bootstrap, topic, rate=200) as producer:
        time.sleep(3)
        bounced = time.time()
        bounce(workers, ("c",), how, flags("c"))
        workers.wait_assigned(PARTITIONS, timeout=60)
        back = time.time()
        time.sleep(3)
    wait_committed_to_end(cluster.bootstrap, workers.group, topic)
    after = {name: workers.counters(name) for name in ("a", "b")}
    again = {name: sorted(workers.assigned(name)) for name in NAMES}
    assert workers.stop_all() == dict.fromkeys(NAMES, 0)

    delivery = workers.delivery(producer)
    print(
        f"\n{protocol}, static {how}: back in {back - bounced:.1f} s: "
        f"{delivery.summary(bounced, back)}"
    )
    assert not delivery.lost, f"lost {len(delivery.lost)} records, first {delivery.lost[:5]}"
    if how == "clean":
        assert delivery.duplicates == 0
    if how == "hard" and protocol == "consumer":
        # KIP-848 holds a killed static member's id until its session ends (30 s here, the
        # broker's 45 s by default) and refuses the new process meanwhile; the worker joins
        # again every 5 s (static_rejoin.py) instead of hanging on a dead client, and gets
        # its partitions back once the session ended and moved them to the others.
        assert back - bounced < SESSION_S + 2 * static_rejoin.RETRY_S + 10
        assert "joining again" in workers.log("c")
    else:
        assert again == held, "the static member came back to other partitions"
        assert after == before, "a member that stayed was revoked while a static one bounced"


@pytest.mark.timeout(600)  # a fault and its recovery, slower on a busy machine
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_second_worker_with_a_live_members_instance_id_never_shares_its_partitions(
    protocol: str,
    cluster_intact: KafkaCluster,
    cluster_topic: Callable[[int], str],
    fleet: FleetFactory,
) -> None:
    """Kafka's ``test_fencing_static_consumer``: two processes given one ``group_instance_id``
    (a copied config). Classic fences the older one, which stops with an error; KIP-848 refuses
    the newer one while the older lives, and it joins once the older has left."""
    cluster = cluster_intact
    topic = cluster_topic(PARTITIONS)
    workers = fleet(topic)
    flags = [*protocol_flags(protocol), "--group-instance-id", f"{workers.group}-x"]
    workers.start("a", *flags)
    workers.start("b", *protocol_flags(protocol), "--group-instance-id", f"{workers.group}-y")
    workers.wait_assigned(PARTITIONS)

    with SteadyProducer(cluster.bootstrap, topic, rate=200) as producer:
        time.sleep(2)
        started = time.time()
        workers.start("twin", *flags)
        if protocol == "classic":
            code = workers.workers["a"].wait(60)
            assert code != 0, "the fenced worker exited as if all were well"
        else:
            wait_until(
                lambda: workers.log("twin").count("joining again") >= 2,
                120,
                "the twin to be refused twice",
                every=0.5,
            )
            assert workers.state("twin").get("joined") is False
            assert not workers.assigned("twin"), "two members of one instance id hold partitions"
            assert workers.stop("a") == 0
        workers.wait_assigned(PARTITIONS, timeout=60)
        assert workers.assigned("twin"), "the twin never took the instance's place"
        time.sleep(3)
    wait_committed_to_end(cluster.bootstrap, workers.group, topic)
    assert set(workers.stop_all().values()) == {0}

    delivery = workers.delivery(producer)
    print(f"\n{protocol}, fenced twin: {delivery.summary(started, time.time())}")
    assert not delivery.lost, f"lost {len(delivery.lost)} records, first {delivery.lost[:5]}"
