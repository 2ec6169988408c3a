"""Leader election by Lease and shards of groups, as pure rules: a Lease held is another's until
it has not changed for its duration on the candidate's own clock; a holder that cannot renew
stands down before anyone may take over; a released Lease is taken at once; a group's shard is
stable across processes; no pod leads under one shard count while a Lease of another lives."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafleet_operator.policy import leases, shards
from kafleet_operator.policy.leases import Observed, Record, Timing

T = Timing(duration_s=15, renew_deadline_s=10.0, retry_s=2.0)  # client-go's


def test_a_lease_no_one_holds_is_taken_at_once() -> None:
    assert leases.decide("a", Observed(None, 0.0), 0.0, T, None) == "acquire"
    released = leases.released(Record("b", 15, 3, "t1"))
    assert leases.decide("a", Observed(released, 100.0), 100.0, T, None) == "acquire"
    assert leases.acquired("a", released, T, "t2") == Record("a", 15, 4, "t2")


def test_anothers_lease_is_theirs_until_it_went_unchanged_for_its_duration_here() -> None:
    held = Observed(Record("b", 15, 0, "t1"), changed_at=100.0)
    assert leases.decide("a", held, 114.9, T, None) == "stand-by"
    assert leases.decide("a", held, 115.0, T, None) == "acquire"
    assert leases.acquired("a", held.record, T, "t9") == Record("a", 15, 1, "t9")


def test_a_renewal_seen_starts_the_duration_again_whatever_the_holders_clock_says() -> None:
    first = leases.seen(None, Record("b", 15, 0, "2026-01-01T00:00:00.000000Z"), 100.0)
    same = leases.seen(first, Record("b", 15, 0, "2026-01-01T00:00:00.000000Z"), 110.0)
    assert same.changed_at == 100.0  # nothing changed: the clock keeps running
    renewed = leases.seen(same, Record("b", 15, 0, "1999-01-01T00:00:00.000000Z"), 112.0)
    assert renewed.changed_at == 112.0  # a change, even to a time long past, is a renewal
    assert leases.decide("a", renewed, 126.0, T, None) == "stand-by"


def test_the_holder_renews_and_stands_down_once_it_could_not_for_the_renew_deadline() -> None:
    mine = Observed(Record("a", 15, 0, "t1"), changed_at=100.0)
    assert leases.decide("a", mine, 105.0, T, renewed_at=100.0) == "renew"
    assert leases.decide("a", mine, 110.0, T, renewed_at=100.0) == "stand-down"


@given(
    last_renewal=st.floats(0, 1_000),
    seen_late_by=st.floats(0, 5),
    now_after=st.floats(0, 100),
)
def test_a_holder_that_cannot_renew_has_stood_down_before_a_standby_may_take_over(
    last_renewal: float, seen_late_by: float, now_after: float
) -> None:
    """The standby saw the last renewal no earlier than it was made (one clock here, as if
    both ran at the same rate); whenever it may take over, the old holder has stood down."""
    now = last_renewal + now_after
    standby_view = Observed(Record("a", 15, 0, "t"), changed_at=last_renewal + seen_late_by)
    holder_view = Observed(Record("a", 15, 0, "t"), changed_at=last_renewal)
    if leases.decide("b", standby_view, now, T, None) == "acquire":
        assert leases.decide("a", holder_view, now, T, renewed_at=last_renewal) == "stand-down"


def test_timings_must_leave_the_holder_time_to_stand_down() -> None:
    with pytest.raises(ValueError, match="renew_deadline_s < duration_s"):
        Timing(duration_s=10, renew_deadline_s=10.0, retry_s=2.0)


def test_a_groups_shard_is_the_same_in_every_process() -> None:
    code = "from kafleet_operator.policy import shards as s; print(s.shard_of('team-a', 'o', 16))"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(other.stdout) == shards.shard_of("team-a", "o", 16)


def test_groups_spread_over_the_shards_evenly() -> None:
    counts = [0] * 4
    for i in range(4_000):
        counts[shards.shard_of("ns", f"group-{i}", 4)] += 1
    assert all(900 <= c <= 1_100 for c in counts), counts


def test_a_shards_lease_names_its_number_and_the_count() -> None:
    assert shards.lease_name(3, 4) == "kafleet-operator-3-of-4"
    assert shards.parse_lease_name("kafleet-operator-3-of-4") == (3, 4)
    for other in (
        "kafleet-operator",
        "kafleet-operator-4-of-4",
        "x-1-of-2",
        "kafleet-operator-a-of-2",
    ):
        assert shards.parse_lease_name(other) is None


def test_no_pod_leads_under_one_count_while_a_lease_of_another_lives() -> None:
    assert shards.may_lead(4, ["kafleet-operator-0-of-4", "kafleet-operator-2-of-4", "other"])
    assert not shards.may_lead(4, ["kafleet-operator-0-of-4", "kafleet-operator-1-of-2"])
    assert shards.may_lead(2, [])


def test_changing_the_count_names_the_groups_whose_shard_number_moves() -> None:
    groups = [("ns", f"g{i}") for i in range(1_000)]
    assert shards.moved(groups, 4, 4) == []
    moved = shards.moved(groups, 2, 4)  # half keep their number: h % 4 in {0, 1}
    assert 400 <= len(moved) <= 600
