"""Which assigned partitions have stopped fetching, and what is done about each (the pure rule of
``engine/fetch_stalls.py``): every fact and clock combination, no broker."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from kafleet.engine.fetch_stalls import (
    STARTED,
    Episode,
    Facts,
    behind,
    choose_action,
    lagging_since,
    restarted,
    settle,
    stalled,
    to_ask,
)

BOUND = 10.0
NOW = 1_000.0
TP = ("orders", 3)

# A partition that stalls: assigned long ago, 40 records behind, seen behind for 6 s.
STALLING = Facts(
    flowing_since=NOW - BOUND,
    held=False,
    log_end=140,
    position=100,
    unread=0,
    has_leader=True,
    lagging_since=NOW - BOUND / 2,
)


def test_a_partition_behind_its_log_end_that_got_nothing_for_the_bound_stalls() -> None:
    assert stalled({TP: STALLING}, NOW, BOUND) == {TP: 40}


# Each way a partition is rightly quiet, one at a time.
QUIET_FOR_A_REASON = {
    "paused by kafleet or being revoked": {"held": True},
    "without a leader": {"has_leader": False},
    "with fetched records kafleet has not read yet": {"unread": 5},
    "whose log end is not yet known": {"log_end": None},
    "whose position is not yet known": {"position": None},
    "idle: at its log end": {"log_end": 100},
    "ahead of a log end read before a record came": {"log_end": 90},
    "just assigned, resumed or restarted": {"flowing_since": NOW - BOUND + 0.01},
    "seen behind only a moment ago": {"lagging_since": NOW - BOUND / 2 + 0.01},
    "never seen behind": {"lagging_since": None},
}


@pytest.mark.parametrize("changes", QUIET_FOR_A_REASON.values(), ids=QUIET_FOR_A_REASON.keys())
def test_a_partition_quiet_for_a_reason_never_stalls(changes: dict[str, object]) -> None:
    assert stalled({TP: replace(STALLING, **changes)}, NOW, BOUND) == {}  # type: ignore[arg-type]


def test_only_when_every_condition_holds_does_a_partition_stall() -> None:
    names = list(QUIET_FOR_A_REASON)
    for broken in itertools.product([False, True], repeat=len(names)):
        reasons = [name for name, breaks in zip(names, broken, strict=True) if breaks]
        facts = STALLING
        for name in reasons:
            facts = replace(facts, **QUIET_FOR_A_REASON[name])  # type: ignore[arg-type]

        verdict = stalled({TP: facts}, NOW, BOUND)

        assert bool(verdict) == (not reasons), reasons


def test_the_bound_and_half_of_it_are_inclusive() -> None:
    exactly = replace(STALLING, flowing_since=NOW - BOUND, lagging_since=NOW - BOUND / 2)

    assert stalled({TP: exactly}, NOW, BOUND) == {TP: 40}


def test_only_the_stalled_partition_of_several_is_named() -> None:
    facts = {
        ("orders", 0): STALLING,
        ("orders", 1): replace(STALLING, held=True),
        ("orders", 2): replace(STALLING, log_end=100),
        ("payments", 0): replace(STALLING, log_end=1_000),
    }

    assert stalled(facts, NOW, BOUND) == {("orders", 0): 40, ("payments", 0): 900}


def test_how_far_behind_is_known_only_when_both_ends_are_and_the_end_is_beyond() -> None:
    assert behind(STALLING) == 40
    assert behind(replace(STALLING, log_end=100)) is None
    assert behind(replace(STALLING, log_end=None)) is None
    assert behind(replace(STALLING, position=None)) is None


def test_the_lag_is_dated_from_when_it_was_first_seen_and_forgotten_once_gone() -> None:
    first = lagging_since(None, STALLING, NOW)
    later = lagging_since(first, STALLING, NOW + 3)
    gone = lagging_since(later, replace(STALLING, position=140), NOW + 4)
    unknown = lagging_since(later, replace(STALLING, log_end=None), NOW + 4)

    assert (first, later, gone, unknown) == (NOW, NOW, None, None)


# -- asking the broker ---------------------------------------------------------------------------

QUIET = Facts(flowing_since=NOW - BOUND / 2, log_end=100, position=100)


def test_a_partition_quiet_for_half_the_bound_with_no_lag_known_is_asked_about() -> None:
    assert to_ask({TP: QUIET}, NOW, BOUND, {}) == [TP]
    assert to_ask({TP: replace(QUIET, log_end=None, position=None)}, NOW, BOUND, {}) == [TP]


@pytest.mark.parametrize(
    "changes",
    [
        {"flowing_since": NOW - BOUND / 2 + 0.01},  # not quiet long enough
        {"log_end": 120},  # its lag is known already
        {"held": True},
        {"unread": 1},
        {"has_leader": False},
    ],
    ids=["recently-flowing", "lag-known", "held", "unread", "leaderless"],
)
def test_no_question_is_asked_where_the_answer_could_not_make_a_stall(
    changes: dict[str, object],
) -> None:
    assert to_ask({TP: replace(QUIET, **changes)}, NOW, BOUND, {}) == []  # type: ignore[arg-type]


def test_a_partition_is_asked_about_at_most_once_every_half_bound_the_longest_unasked_first() -> (
    None
):
    facts = {("t", 0): QUIET, ("t", 1): QUIET, ("t", 2): QUIET}
    asked = {("t", 0): NOW - BOUND / 2 + 1, ("t", 1): NOW - BOUND, ("t", 2): NOW - 2 * BOUND}

    assert to_ask(facts, NOW, BOUND, asked) == [("t", 2), ("t", 1)]


# -- choosing the restart -----------------------------------------------------------------------


@pytest.mark.parametrize("state", sorted(STARTED))
def test_a_started_fetcher_with_a_known_offset_is_first_restarted_by_a_seek(state: str) -> None:
    assert choose_action(0, state, 100) == "seek"


@pytest.mark.parametrize(
    ("attempt", "state", "offset"),
    [
        (0, "none", 100),  # never started: librdkafka#5586's partition, a seek answers _STATE
        (0, "stopped", 100),
        (0, "stopping", 100),
        (0, None, 100),  # no statistics for it
        (0, "active", None),  # no record since its assignment: no offset to seek to
        (1, "active", 100),  # a seek did not help
        (3, "active", 100),
    ],
)
def test_everything_else_is_restarted_by_re_assigning_the_partition(
    attempt: int, state: str | None, offset: int | None
) -> None:
    assert choose_action(attempt, state, offset) == "reassign"


# -- episodes -----------------------------------------------------------------------------------


def test_a_new_stall_opens_an_episode_and_restarts_at_once() -> None:
    episodes: dict[tuple[str, int], Episode] = {}

    plan = settle(episodes, {TP: STALLING}, {}, NOW, BOUND)

    assert (plan.detected, plan.restart, plan.recovered, plan.dropped) == ([TP], [TP], [], [])
    assert episodes == {TP: Episode(NOW, 40)}


def test_an_open_episode_restarts_again_only_a_bound_after_its_last_restart() -> None:
    episodes = {TP: Episode(NOW, 40)}
    restarted(episodes, [(TP, "seek")], NOW)
    quiet = replace(STALLING, flowing_since=NOW)  # the restart starts the clock again

    soon = settle(episodes, {TP: quiet}, {}, NOW + BOUND - 0.01, BOUND)
    later = settle(episodes, {TP: replace(quiet, log_end=150)}, {}, NOW + BOUND, BOUND)

    assert (soon.restart, soon.detected) == ([], [])
    assert (later.restart, later.detected) == ([TP], [])
    assert episodes[TP] == Episode(NOW, 50, restarts=1, restarted_at=NOW, action="seek")


def test_a_record_after_the_detection_ends_the_episode_as_recovered() -> None:
    episodes = {TP: Episode(NOW, 40)}
    flowing = replace(STALLING, flowing_since=NOW + 1, lagging_since=None)

    plan = settle(episodes, {TP: flowing}, {TP: NOW + 1}, NOW + 2, BOUND)

    assert (plan.recovered, plan.restart, episodes) == ([TP], [], {})


def test_a_record_from_before_the_detection_does_not_end_it() -> None:
    episodes = {TP: Episode(NOW, 40)}

    plan = settle(episodes, {TP: STALLING}, {TP: NOW - 30}, NOW, BOUND)

    assert (plan.recovered, list(episodes)) == ([], [TP])


def test_a_lag_that_is_gone_ends_the_episode_as_recovered_but_an_unknown_one_does_not() -> None:
    gone = {TP: Episode(NOW, 40)}
    unknown = {TP: Episode(NOW, 40)}

    caught_up = settle(gone, {TP: replace(STALLING, position=140)}, {}, NOW + 1, BOUND)
    not_known = settle(unknown, {TP: replace(STALLING, log_end=None)}, {}, NOW + 1, BOUND)

    assert (caught_up.recovered, gone) == ([TP], {})
    assert (not_known.recovered, list(unknown)) == ([], [TP])
    assert unknown[TP].lag == 40  # the last lag known stays


@pytest.mark.parametrize(
    "facts", [{}, {TP: replace(STALLING, held=True)}], ids=["revoked", "held-by-kafleet"]
)
def test_a_partition_revoked_or_held_by_kafleet_drops_its_episode_unrecovered(
    facts: dict[tuple[str, int], Facts],
) -> None:
    episodes = {TP: Episode(NOW, 40)}

    plan = settle(episodes, facts, {}, NOW + 1, BOUND)

    assert (plan.dropped, plan.recovered, plan.restart, episodes) == ([TP], [], [], {})


def test_restarts_are_counted_with_their_action_and_time() -> None:
    episodes = {TP: Episode(NOW, 40), ("t", 9): Episode(NOW, 1)}

    restarted(episodes, [(TP, "seek"), (("gone", 0), "reassign")], NOW + 1)
    restarted(episodes, [(TP, "reassign")], NOW + 12)

    assert episodes[TP] == Episode(NOW, 40, restarts=2, restarted_at=NOW + 12, action="reassign")
    assert episodes[("t", 9)] == Episode(NOW, 1)
