"""Operator pods share the shards of ConsumerGroups through real Leases on a real kube-apiserver:
one pod alone leads every shard; a second pod takes its share at its next steps; a pod that
stops renewing (killed) loses its shards to the other once its Leases went unchanged for their
duration, and has stood down by then; a pod that leaves cleanly releases its shards and the
other takes them at its next step; no shard is ever led by two pods at once. The clock is each
pod's own, moved by the test (the rules: ``test_leadership_policies.py``)."""

from __future__ import annotations

import random

import pytest
from kubernetes import client as k8s_client

from kafleet_operator.policy import shards
from kafleet_operator.policy.leases import Timing
from kafleet_operator.reconcile.elector import Elector
from tests.conftest import K8s
from tests.infra.clock import Clock

SHARDS = 4
TIMING = Timing(duration_s=15, renew_deadline_s=10.0, retry_s=2.0)


@pytest.fixture
def pods(k8s: K8s, namespace: str) -> tuple[Elector, Elector, Clock]:
    clock = Clock(1_000)
    api = k8s_client.CoordinationV1Api(k8s.api)
    a = Elector("pod-a", namespace, SHARDS, api, TIMING, clock=clock)
    b = Elector("pod-b", namespace, SHARDS, api, TIMING, clock=clock)
    return a, b, clock


def _steps(clock: Clock, *pods: Elector, seconds: float = TIMING.retry_s) -> None:
    for pod in pods:
        pod.step()
    clock.now += seconds


def test_one_pod_alone_leads_every_shard(pods: tuple[Elector, Elector, Clock]) -> None:
    a, _, clock = pods
    _steps(clock, a)
    assert a.led == frozenset(range(SHARDS))


def test_a_second_pod_gets_its_share_and_no_shard_is_led_twice(
    pods: tuple[Elector, Elector, Clock],
) -> None:
    a, b, clock = pods
    _steps(clock, a)
    for _ in range(3):
        _steps(clock, b, a)
        assert not a.led & b.led
    assert len(a.led) == len(b.led) == SHARDS // 2
    assert a.led | b.led == frozenset(range(SHARDS))
    assert a.owns("team", "orders") != b.owns("team", "orders")


def test_a_killed_pods_shards_go_to_the_other_once_its_leases_expire(
    pods: tuple[Elector, Elector, Clock],
) -> None:
    a, b, clock = pods
    for _ in range(3):
        _steps(clock, a, b)
    held_by_a = a.led
    for _ in range(int(TIMING.duration_s / TIMING.retry_s) + 2):  # a is dead: only b steps
        _steps(clock, b)
        if held_by_a & b.led:
            break
    else:
        pytest.fail(f"b never took a's shards {sorted(held_by_a)}: it leads {sorted(b.led)}")
    group = next(
        ("team", f"g{i}")
        for i in range(1_000)
        if shards.shard_of("team", f"g{i}", SHARDS) in held_by_a
    )
    assert not a.owns(*group)  # stalled past its renew deadline, it acts on nothing before a step
    a.step()  # were a only slow, it finds it must stand down: never two leaders
    assert not a.led & b.led
    for _ in range(2):  # back, it is a member again: b gives it its share
        _steps(clock, b, a)
        assert not a.led & b.led
    assert a.led | b.led == frozenset(range(SHARDS))
    assert len(a.led) == len(b.led)


def test_a_pod_that_leaves_cleanly_hands_its_shards_over_at_the_others_next_step(
    pods: tuple[Elector, Elector, Clock],
) -> None:
    a, b, clock = pods
    for _ in range(3):
        _steps(clock, a, b)
    a.release()
    assert a.led == frozenset()
    _steps(clock, b)
    assert b.led == frozenset(range(SHARDS))


def test_no_pod_leads_under_a_new_shard_count_while_a_lease_of_the_old_lives(
    k8s: K8s, namespace: str, pods: tuple[Elector, Elector, Clock]
) -> None:
    old, _, clock = pods
    new = Elector(
        "pod-new", namespace, 8, k8s_client.CoordinationV1Api(k8s.api), TIMING, clock=clock
    )
    _steps(clock, old)
    _steps(clock, new, old)
    assert new.led == frozenset()
    assert old.led == frozenset(range(SHARDS))
    old.release()
    _steps(clock, new)
    assert new.led == frozenset(range(8))


def test_a_pod_whose_renewals_are_late_stops_writing_keeps_its_groups_and_leads_again_after(
    pods: tuple[Elector, Elector, Clock],
) -> None:
    """A slow API server: no step of ``a`` for longer than the renew deadline. It owns (may
    write) nothing then, but holds its groups (keeps their memory and series) until the Lease's
    duration, before which no other pod may lead them. Alone, it leads again at its next step
    (it stood down for good before)."""
    a, _, clock = pods
    _steps(clock, a)
    assert a.owns("team", "orders")
    assert a.holds("team", "orders")
    clock.now += TIMING.renew_deadline_s
    assert not a.owns("team", "orders")
    assert a.holds("team", "orders")
    clock.now += TIMING.duration_s - TIMING.renew_deadline_s
    assert not a.holds("team", "orders")
    _steps(clock, a)  # the Lease still its own: renewed at last
    assert a.owns("team", "orders")


def _one_group_per_shard(count: int) -> list[tuple[str, str]]:
    found: dict[int, tuple[str, str]] = {}
    for i in range(10_000):
        found.setdefault(shards.shard_of("team", f"g{i}", count), ("team", f"g{i}"))
        if len(found) == count:
            return [found[s] for s in range(count)]
    raise AssertionError(f"no group for every one of {count} shards")


@pytest.mark.parametrize("seed", range(3))
def test_under_stalls_kills_restarts_and_leaves_no_group_is_ever_owned_by_two_pods(
    k8s: K8s, namespace: str, seed: int
) -> None:
    """Three pods step at random on one clock; at random one stalls (steps no more for up to
    twice a Lease's duration, then goes on as if nothing happened), is killed (never steps
    again; a new pod starts in its place) or leaves cleanly (and a new pod starts). After every
    step of any pod, every group is owned by at most one pod; and once all is quiet, every
    shard is led again."""
    rng = random.Random(seed)
    clock = Clock(1_000)
    api = k8s_client.CoordinationV1Api(k8s.api)
    groups = _one_group_per_shard(SHARDS)
    born = iter(range(1_000))
    pods = {f"pod-{next(born)}": 0.0 for _ in range(3)}  # identity -> stalled until
    electors = {i: Elector(i, namespace, SHARDS, api, TIMING, clock=clock) for i in pods}
    handovers = 0
    for _ in range(150):
        clock.now += rng.uniform(0.3, TIMING.retry_s)
        for identity in rng.sample(sorted(pods), len(pods)):
            if pods[identity] > clock.now:
                continue  # stalled
            electors[identity].step()
            owners = [[i for i in pods if electors[i].owns(*g)] for g in groups]
            assert all(len(o) <= 1 for o in owners), f"two owners at {clock.now}: {owners}"
            holders = [[i for i in pods if electors[i].holds(*g)] for g in groups]
            assert all(len(h) <= 1 for h in holders), f"two holders at {clock.now}: {holders}"
        fate = rng.random()
        victim = rng.choice(sorted(pods))
        if fate < 0.05:
            pods[victim] = clock.now + rng.uniform(1, 2 * TIMING.duration_s)
        elif fate < 0.10:
            if rng.random() < 0.5:
                electors[victim].release()
            del pods[victim]
            newcomer = f"pod-{next(born)}"
            pods[newcomer] = 0.0
            electors[newcomer] = Elector(newcomer, namespace, SHARDS, api, TIMING, clock=clock)
            handovers += 1
    for identity in pods:
        pods[identity] = 0.0
    for _ in range(int(TIMING.duration_s / TIMING.retry_s) + 4):
        _steps(clock, *(electors[i] for i in pods))
    led = [i for i in pods for g in groups if electors[i].owns(*g)]
    assert len(led) == SHARDS, f"after {handovers} pods came and went, shards led: {led}"
