"""Share groups (``group_type: share``) in the operator, called directly (pure: no I/O).

A share group's members take records of every partition, so its replicas go up to
``max_replicas`` whatever the partition count, and ``even_partitions`` has nothing to even out
(the spec refuses it; the policy ignores it). The spec refuses what a share group cannot run
with (static membership, an image without Java), judges the worker's own rules as the worker
does, and never takes the operator's environment for the workers'. A share group's lag is the
broker's (KIP-1226), bounded from its start offset where the broker cannot tell it, and counted
as a partition with no commit where the group has not started; never zero for unknown."""

from __future__ import annotations

import time
from typing import Any

import jpype
import pytest
from confluent_kafka import KafkaError, KafkaException
from hypothesis import given
from hypothesis import strategies as st

from kafleet.config.security import Security
from kafleet.errors import ConfigError
from kafleet_operator.policy import builders, crd, scaling
from kafleet_operator.policy.autopilot import Autoscaling
from kafleet_operator.policy.spec import PER_POD, image_name, parse_spec
from kafleet_operator.reading import clusters, lag_reader, share_lag, snapshots
from kafleet_operator.reading.share_lag import ShareState

OWNER = {
    "apiVersion": "kafleet.io/v1alpha1",
    "kind": "ConsumerGroup",
    "metadata": {"name": "billing", "namespace": "shop", "uid": "u-1"},
}


# -- scaling -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lag", "partitions", "max_replicas", "consumer", "share"),
    [
        (4_000, 1, 4, 1, 4),  # one partition, a backlog for 40: a share group runs all 4
        (4_000, 3, 10, 3, 10),
        (250, 1, 10, 1, 3),  # ceil(250 / 100)
        (250, 8, 10, 3, 3),  # under both caps: the same wish
        (100_000, 12, 10, 10, 10),  # max_replicas below the partitions: the same cap
        (100_000, 1_000, 1_000, 1_000, 1_000),
        (0, 1, 4, 1, 1),  # min_replicas 1
        (1, 1, 4, 1, 1),
        (101, 1, 4, 1, 2),
        (4_000, 0, 4, 1, 4),  # no partition yet: a consumer group's cap is 1
    ],
)
def test_a_share_groups_replicas_go_past_the_partition_count_up_to_max_replicas(
    lag: int, partitions: int, max_replicas: int, consumer: int, share: int
) -> None:
    policy = Autoscaling(max_replicas=max_replicas, lag_per_replica=100)

    assert scaling.wanted(lag, partitions, policy) == consumer
    assert scaling.wanted(lag, partitions, policy, share=True) == share


def test_min_replicas_above_the_partition_count_holds_for_a_share_group() -> None:
    """A consumer group's floor is cut to its partitions (the rest would idle); a share
    group's members all take records, so min_replicas is what it says."""
    policy = Autoscaling(min_replicas=3, max_replicas=6, lag_per_replica=100)

    assert scaling.wanted(0, 2, policy) == 2
    assert scaling.wanted(0, 2, policy, share=True) == 3


def test_a_share_group_scales_to_zero_and_from_zero_as_a_consumer_group() -> None:
    policy = Autoscaling(min_replicas=0, max_replicas=8, lag_per_replica=100, activation_lag=50)

    assert scaling.wanted(50, 1, policy, share=True) == 0  # at activation_lag: zero
    assert scaling.wanted(51, 1, policy, share=True) == 1  # just over it: from zero
    assert scaling.wanted(790, 1, policy, share=True) == 8
    assert scaling.wanted(10_000, 1, policy, share=True) == 8


@pytest.mark.parametrize(
    ("partitions", "lag", "snapped", "share"), [(12, 500, 6, 5), (1, 500, 1, 5)]
)
def test_even_partitions_snaps_a_consumer_group_but_never_a_share_group(
    partitions: int, lag: int, snapped: int, share: int
) -> None:
    """The spec refuses even_partitions with a share group; the policy ignores it anyway."""
    policy = Autoscaling(max_replicas=12, lag_per_replica=100, even_partitions=True)

    assert scaling.wanted(lag, partitions, policy) == snapped
    assert scaling.wanted(lag, partitions, policy, share=True) == share


def test_behind_in_time_a_share_group_takes_what_the_rates_need_past_the_partitions() -> None:
    """900 records/s in, 100/s per replica, 60,000 behind against a 60 s target: 19."""
    policy = Autoscaling(max_replicas=50, lag_per_replica=100_000, target_time_lag_s=60)
    rates = scaling.Rates(input_per_s=900.0, per_replica_per_s=100.0)

    assert scaling.wanted(60_000, 1, policy, 90, 2, rates) == 1
    assert scaling.wanted(60_000, 1, policy, 90, 2, rates, share=True) == 19
    assert scaling.wanted(60_000, 1, policy, 90, 2, rates, share=True) <= policy.max_replicas


def test_a_share_group_that_keeps_up_is_held_past_the_partition_count() -> None:
    """Six replicas keep up with 200 records/s (40/s each, 10% headroom) on two partitions:
    held at six though the lag alone asks for two."""
    policy = Autoscaling(max_replicas=12, lag_per_replica=100)
    keeping_up = scaling.Rates(input_per_s=200.0, per_replica_per_s=20.0, capacity_per_s=40.0)

    assert scaling.wanted(150, 2, policy, current=10, rates=keeping_up, share=True) == 6
    assert scaling.wanted(150, 2, policy, current=10, rates=keeping_up) == 2


def test_a_scale_up_past_the_partitions_still_steps_as_the_policy_says() -> None:
    """The cap moves, not the pace: 1 -> 5 (scale_up_max_pods 4), then the rest once the
    period is over and the pods are Ready."""
    policy = Autoscaling(max_replicas=12, lag_per_replica=100)
    wish = scaling.wanted(100_000, 1, policy, share=True)

    first = scaling.decide(1, [(0.0, wish)], 0.0, policy)
    assert (wish, first.replicas, first.reason) == (12, 5, "ScaledUpForLag")
    second = scaling.decide(5, [(16.0, wish)], 16.0, policy, ready=5, steps=[(0.0, 1)])
    assert second.replicas == 10


policies = st.builds(
    lambda low, high, per, activation, even: Autoscaling(
        min_replicas=min(low, high),
        max_replicas=high,
        lag_per_replica=per,
        activation_lag=activation,
        even_partitions=even,
    ),
    st.integers(0, 40),
    st.integers(1, 40),
    st.integers(1, 5_000),
    st.integers(0, 500),
    st.booleans(),
)
rates = st.none() | st.builds(
    scaling.Rates,
    st.floats(0, 5_000),
    st.none() | st.floats(0.1, 500),
    st.none() | st.floats(0.1, 500),
)


@given(
    lag=st.integers(0, 10**7),
    partitions=st.integers(0, 64),
    other_partitions=st.integers(0, 64),
    policy=policies,
    current=st.integers(0, 40),
    rate=rates,
)
def test_a_share_groups_wish_is_the_consumer_groups_without_the_partition_cap(
    lag: int,
    partitions: int,
    other_partitions: int,
    policy: Autoscaling,
    current: int,
    rate: scaling.Rates | None,
) -> None:
    """For every lag, policy and rate: a share group's wish does not depend on the partition
    count, stays within max_replicas (and over min_replicas unless it may scale to zero),
    and a consumer group's is that wish capped at its partitions."""
    plain = policy.model_copy(update={"even_partitions": False})
    share = scaling.wanted(lag, partitions, policy, current=current, rates=rate, share=True)

    assert share == scaling.wanted(
        lag, other_partitions, policy, current=current, rates=rate, share=True
    )
    assert share <= policy.max_replicas
    assert share >= policy.min_replicas or (share == 0 and policy.min_replicas == 0)
    assert scaling.wanted(lag, partitions, plain, current=current, rates=rate) == min(
        share, max(partitions, 1)
    )


# -- the spec ----------------------------------------------------------------------------------


def share_spec(**change: Any) -> dict[str, Any]:
    return {
        "image": "registry.example.com/kafleet-spark:0.9.0",
        "handler": "orders:bill",
        "bootstrap_servers": "kafka:9092",
        "group_id": "billing",
        "topics": ["orders"],
        "group_type": "share",
        **change,
    }


def refused(spec: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigError) as caught:
        parse_spec(spec)
    return {p.field: p.reason for p in caught.value.problems}


def test_a_share_group_parses_unordered_with_its_share_settings_in_the_workers_file() -> None:
    parsed = parse_spec(share_spec(share={"consumers": 2, "delivery_limit": 3}))

    assert parsed.worker.group_type == "share"
    assert parsed.worker.ordering == "unordered"
    file = parsed.worker_file()
    assert file["group_type"] == "share"
    assert file["share"]["consumers"] == 2
    assert file["share"]["delivery_limit"] == 3
    pod = builders.deployment(OWNER, parsed, 3)["spec"]["template"]["spec"]
    (worker,) = pod["containers"]
    assert worker["image"] == "registry.example.com/kafleet-spark:0.9.0"
    assert not any(v["name"] == "KAFLEET_GROUP_INSTANCE_ID" for v in worker["env"])


def test_static_membership_is_refused_for_a_share_group_naming_it() -> None:
    problems = refused(share_spec(static_membership=True))

    assert set(problems) == {"static_membership"}
    assert "no static membership" in problems["static_membership"]
    assert parse_spec({**share_spec(static_membership=True), "group_type": "consumer"})


def test_even_partitions_is_refused_for_a_share_group_naming_it() -> None:
    problems = refused(share_spec(autoscaling={"max_replicas": 4, "even_partitions": True}))

    assert set(problems) == {"autoscaling.even_partitions"}
    assert parse_spec(share_spec(autoscaling={"max_replicas": 4, "even_partitions": False}))


@pytest.mark.parametrize(
    "image",
    [
        "kafleet",
        "kafleet:0.9.0",
        "registry.example.com/kafleet:0.9.0",
        "registry.example.com:5000/team/kafleet:0.9.0",
        "registry.example.com/kafleet@sha256:" + "a" * 64,
        "registry.example.com/kafleet:0.9.0@sha256:" + "a" * 64,
    ],
)
def test_kafleets_default_image_is_refused_for_a_share_group_it_has_no_java(image: str) -> None:
    problems = refused(share_spec(image=image))

    assert set(problems) == {"image"}
    assert "no Java" in problems["image"]
    assert "kafleet-spark" in problems["image"]
    assert parse_spec({**share_spec(image=image), "group_type": "consumer"})


@pytest.mark.parametrize(
    "image",
    [
        "kafleet-spark:0.9.0",
        "registry.example.com/kafleet-spark:0.9.0",
        "registry.example.com:5000/kafleet/billing-worker:1.4.2",  # a path named kafleet
        "registry.example.com/billing-worker:1.4.2",  # built on kafleet-spark, say
    ],
)
def test_other_images_are_taken_for_a_share_group(image: str) -> None:
    assert parse_spec(share_spec(image=image)).fleet.image == image


@pytest.mark.parametrize(
    ("image", "name"),
    [
        ("kafleet", "kafleet"),
        ("localhost:5000/kafleet", "kafleet"),
        ("localhost:5000/kafleet:1", "kafleet"),
        ("a/b/kafleet-spark:1@sha256:00", "kafleet-spark"),
    ],
)
def test_an_image_references_repository_name(image: str, name: str) -> None:
    assert image_name(image) == name


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"ordering": "key"}, "ordering"),
        ({"ordering": "partition"}, "ordering"),
        ({"guarantee": "exactly-once", "spark": {"table": "/t"}}, "guarantee"),
        ({"topics": [], "topic_pattern": "orders.*"}, "topic_pattern"),
        ({"on_failure": "stop-partition"}, "on_failure"),
        ({PER_POD: "pod-0"}, PER_POD),
    ],
)
def test_the_workers_share_rules_are_judged_as_the_worker_judges_them(
    change: dict[str, Any], field: str
) -> None:
    assert field in refused(share_spec(**change))


def test_the_operators_environment_never_reaches_a_workers_configuration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The kafleet-spark image sets KAFLEET_SHARE__CLASSPATH; an operator run from it read
    that (and any KAFLEET_* variable) into every spec it parsed, and so into the workers'
    ConfigMaps and their config hash."""
    monkeypatch.setenv("KAFLEET_SHARE__CLASSPATH", "/opt/kafleet/share-client/*")
    monkeypatch.setenv("KAFLEET_CONCURRENCY", "3")
    monkeypatch.setenv("KAFLEET_SHARE__CONSUMERS", "7")

    parsed = parse_spec(share_spec())

    assert parsed.worker.share.classpath is None
    assert parsed.worker.share.consumers == 1
    assert parsed.worker.concurrency == 16
    monkeypatch.delenv("KAFLEET_SHARE__CLASSPATH")
    monkeypatch.delenv("KAFLEET_CONCURRENCY")
    monkeypatch.delenv("KAFLEET_SHARE__CONSUMERS")
    assert builders.config_hash(parse_spec(share_spec())) == builders.config_hash(parsed)


def test_the_crd_takes_group_type_and_share_and_refuses_the_share_rules_it_can_say() -> None:
    schema = crd.spec_schema()

    assert schema["properties"]["group_type"]["enum"] == ["consumer", "share"]
    # partition, unordered for a share group: the model says it, not the API server.
    assert "default" not in schema["properties"]["ordering"]
    assert "delivery_limit" in schema["properties"]["share"]["properties"]
    paths = {rule["fieldPath"] for rule in schema["x-kubernetes-validations"]}
    assert {".static_membership", ".autoscaling.even_partitions"} <= paths
    columns = {c["name"]: c["jsonPath"] for c in crd.COLUMNS}
    assert columns["Lag"] == ".status.lag"  # the same figure for both kinds of group


# -- the lag -----------------------------------------------------------------------------------


def snapshot(**fields: Any) -> snapshots.Snapshot:
    return snapshots.Snapshot(topics={"orders": (0, 1, 2)}, **fields)


ENDS = {("orders", 0): 100, ("orders", 1): 50, ("orders", 2): 30}
SHARE = snapshots.Want("billing", ("orders",), share=True)


def test_a_share_groups_lag_is_the_brokers_where_it_knows_it() -> None:
    states = {tp: ShareState(start=10, lag=n) for tp, n in zip(ENDS, (40, 0, 30), strict=True)}

    reading = lag_reader.lag_of(snapshot(ends=ENDS, share={"billing": states}), SHARE)

    assert reading.lag == {("orders", 0): 40, ("orders", 1): 0, ("orders", 2): 30}
    assert reading.committed == {("orders", 0): 60, ("orders", 1): 50, ("orders", 2): 0}
    assert (reading.total, reading.max_partition, reading.partitions) == (70, 40, 3)
    assert reading.committed_total == 110


def test_where_the_broker_cannot_tell_the_lag_every_record_from_the_start_offset_counts() -> None:
    """Some records past the start offset may be done: a bound, never below the lag."""
    states = {
        ("orders", 0): ShareState(start=60, lag=None),
        ("orders", 1): ShareState(start=50, lag=None),
        ("orders", 2): ShareState(start=31, lag=None),  # past the end read a moment before
    }

    reading = lag_reader.lag_of(snapshot(ends=ENDS, share={"billing": states}), SHARE)

    assert reading.lag == {("orders", 0): 40, ("orders", 1): 0, ("orders", 2): 0}


@pytest.mark.parametrize(
    ("earliest", "zero", "lags"),
    [
        (True, False, {("orders", 0): 95, ("orders", 1): 50, ("orders", 2): 30}),
        (False, False, {("orders", 0): 1, ("orders", 1): 1, ("orders", 2): 1}),
        (True, True, {("orders", 0): 0, ("orders", 1): 0, ("orders", 2): 0}),
    ],
)
def test_where_a_share_group_has_not_started_it_counts_as_a_partition_with_no_commit(
    earliest: bool, zero: bool, lags: dict[tuple[str, int], int]
) -> None:
    """A group that never had a member has no state at all; one whose members never took a
    record of a partition has none there (or a state without a start offset): from the log
    start with auto_offset_reset earliest, 1 with latest (KEDA's count, so a new group is not
    scaled to zero), 0 with scale_to_zero_on_invalid_offset."""
    states = {("orders", 1): ShareState(None, None)}  # 0 and 2: no state at all
    starts = {("orders", 0): 5, ("orders", 1): 0, ("orders", 2): 0}
    found = snapshot(ends=ENDS, starts=starts, share={"billing": states})

    reading = lag_reader.lag_of(found, SHARE, reset_earliest=earliest, zero_without_commit=zero)

    assert reading.lag == lags
    assert reading.committed == dict.fromkeys(ENDS)


def test_a_share_partition_with_no_state_and_no_log_start_is_unknown_not_zero() -> None:
    found = snapshot(ends=ENDS, starts={("orders", 0): 0, ("orders", 2): 0}, share={"billing": {}})

    with pytest.raises(lag_reader.LagUnreadableError) as caught:
        lag_reader.lag_of(found, SHARE)

    assert "orders[1]" in str(caught.value)


def test_a_share_partition_whose_log_end_cannot_be_read_is_unknown_not_zero() -> None:
    timed_out = snapshots.Failure(KafkaError._TIMED_OUT, "leader not available")
    states = dict.fromkeys(ENDS, ShareState(0, 0))
    found = snapshot(
        ends={("orders", 0): 100, ("orders", 1): 50},
        unreadable={("orders", 2): timed_out},
        share={"billing": states},
    )

    with pytest.raises(lag_reader.LagUnreadableError, match=r"orders\[2\]"):
        lag_reader.lag_of(found, SHARE)


def test_a_share_group_whose_states_cannot_be_read_raises_kafkas_words() -> None:
    failed = snapshots.Failure(KafkaError.GROUP_AUTHORIZATION_FAILED, "GroupAuthorizationException")
    found = snapshot(ends=ENDS, share={"billing": failed})

    with pytest.raises(KafkaException) as caught:
        lag_reader.lag_of(found, SHARE)

    assert lag_reader.describe(caught.value) == "GroupAuthorizationException"
    assert not lag_reader.is_share_client_missing(caught.value)


def test_a_share_group_reads_its_own_states_never_a_consumer_groups_commits() -> None:
    """Two ConsumerGroups may name one group id, one of each kind: each reads its own."""
    found = snapshot(
        ends=ENDS,
        committed={"billing": dict.fromkeys(ENDS, 0)},
        share={"billing": dict.fromkeys(ENDS, ShareState(0, 7))},
    )

    assert lag_reader.lag_of(found, SHARE).total == 21
    assert lag_reader.lag_of(found, snapshots.Want("billing", ("orders",))).total == 180


def _no_jvm(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The JVM's starts, recorded instead of made."""
    started: list[object] = []
    monkeypatch.setattr(jpype, "startJVM", lambda *a, **k: started.append((a, k)))
    return started


def test_without_a_share_client_every_share_group_says_what_to_set_and_starts_no_jvm(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started = _no_jvm(monkeypatch)
    offsets = share_lag.ShareOffsets("127.0.0.1:9", Security(), None)

    answers = offsets.read(["billing", "refunds"], 1.0)

    assert set(answers) == {"billing", "refunds"}
    answer = answers["billing"]
    assert isinstance(answer, tuple)
    code, text = answer
    assert code == KafkaError._NOT_CONFIGURED
    assert "KAFLEET_SHARE__CLASSPATH" in text
    assert "--share-classpath" in text
    error = snapshots.Failure(code, text).exception()
    assert lag_reader.is_share_client_missing(error)
    assert started == []


def test_a_classpath_without_kafkas_client_is_named_and_starts_no_jvm(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started = _no_jvm(monkeypatch)
    offsets = share_lag.ShareOffsets("127.0.0.1:9", Security(), "/nonexistent/*")

    answer = offsets.read(["billing"], 1.0)["billing"]
    assert isinstance(answer, tuple)
    code, text = answer

    assert code == KafkaError._NOT_CONFIGURED
    assert "KAFLEET_SHARE__CLASSPATH=/nonexistent/*" in text
    assert "kafka-clients" in text
    assert started == []


class FakeShares:
    """The Java admin's answers, without a JVM."""

    def __init__(self, answers: dict[str, share_lag.Answer]) -> None:
        self.answers = answers
        self.asked: list[list[str]] = []

    def read(self, groups: list[str], timeout_s: float) -> dict[str, share_lag.Answer]:
        self.asked.append(groups)
        return {g: self.answers[g] for g in groups if g in self.answers}


def test_a_views_share_groups_are_read_in_one_round_and_their_unstarted_partitions_named() -> None:
    view = clusters.View("127.0.0.1:9", Security())
    fake = FakeShares(
        {
            "billing": {("orders", 0): ShareState(0, 4), ("orders", 1): ShareState(None, None)},
            "refunds": (KafkaError._TIMED_OUT, "TimeoutException: no answer"),
        }
    )
    view.shares = fake  # type: ignore[assignment]
    found = snapshots.Snapshot()
    watched = {
        "billing": [("orders", 0), ("orders", 1), ("orders", 2)],
        "refunds": [("orders", 0)],
        "silent": [("orders", 0)],  # an answer missing altogether
    }

    unstarted = view._shares(watched, found, time.monotonic() + 5)

    assert fake.asked == [["billing", "refunds", "silent"]]
    assert unstarted == {("orders", 1), ("orders", 2)}
    assert found.share["billing"] == {
        ("orders", 0): ShareState(0, 4),
        ("orders", 1): ShareState(None, None),
    }
    assert found.share["refunds"] == snapshots.Failure(
        KafkaError._TIMED_OUT, "TimeoutException: no answer"
    )
    assert isinstance(found.share["silent"], snapshots.Failure)


def test_a_share_group_spec_without_timeouts_gives_its_workers_the_share_defaults() -> None:
    spec = {
        "image": "registry.example/kafleet-spark:1",
        "bootstrap_servers": "kafka:9092",
        "group_id": "renders",
        "topics": ["renders"],
        "group_type": "share",
        "concurrency": 8,
        "share": {"consumers": 2},
    }

    worker = parse_spec(spec).worker_file()

    assert worker["processing_timeout_s"] == 30.0  # not 300: the broker refuses such a lock
    assert worker["max_poll_records"] == 4
    assert worker["ordering"] == "unordered"
