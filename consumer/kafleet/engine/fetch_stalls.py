"""Fetch stalls: which assigned partitions have stopped fetching, and what to do about each.

librdkafka#5586 (open in 2026): after the group coordinator moves, an OffsetFetch answered
with a request-level NOT_COORDINATOR leaves an assigned partition on the assignment's
``.queried`` list for ever (``rdkafka_assignment.c``: ``rd_kafka_assignment_apply_offsets``
does nothing for request-level errors, and ``rd_kafka_assignment_serve_pending`` sends no new
OffsetFetch while that list is not empty). Its fetcher is never started: the consumer stays
in the group and keeps polling, the partition fetches nothing, and its lag grows until the
process restarts. The same silence follows anything that stops a fetcher behind kafleet's
back. Here that is told apart from a partition that is legitimately quiet.

A partition *stalls* when all of these hold (``stalled``):
- kafleet lets it flow: it is not paused by kafleet (back-pressure, a stopped partition, the
  drain, the at-most-once hold) nor being revoked (``held`` is false);
- librdkafka knows its leader (a leaderless partition waits for the cluster, which a restart
  of its fetch cannot hurry) and holds none of its records unread (``unread``: fetched, only
  not read by kafleet yet, which is kafleet's own pace, not a stall);
- it is behind its log end: a log end and a position are both known and the end is beyond
  (an unknown log end or position never makes a stall);
- nothing has reached kafleet from it for ``timeout_s`` since the later of its assignment,
  its last record, kafleet's last pause or resume of it and the last restart of its fetch
  (``flowing_since``), so a partition just assigned or resumed gets the whole bound;
- it has been seen behind for half the bound already (``lagging_since``): a healthy fetcher
  brings a record written a moment ago within a second, so a record that lands just as the
  partition is looked at is not taken for a stall.

Once a partition stalls it is an ``Episode`` until a record arrives from it or its lag is gone
(recovered), or it is revoked (dropped): its fetch is restarted at once and again every
``timeout_s`` while the episode lasts (``settle``). The first restart is the least disruptive
one that restarts a started fetcher, a ``seek`` to the offset kafleet expects next; a fetcher
that was never started (the #5586 signature: librdkafka's ``fetch_state`` none or stopped, on
which ``rd_kafka_toppar_seek`` answers ``_STATE``), an unknown offset, and every later attempt
take the re-assignment of that partition alone (``choose_action``).

Pure: facts and a clock in, decisions out; no I/O and no threads. Gathering the facts, asking
the broker for a log end and carrying the restarts out is ``fetch_watch.py``'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

TP = tuple[str, int]
Action = Literal["seek", "reassign"]

# librdkafka's fetch states (rd_kafka_fetch_states) in which a fetcher was started, so that
# rd_kafka_toppar_seek can move it: every other one ("none", "stopping", "stopped") needs an
# assignment to start it again.
STARTED = frozenset({"offset-query", "offset-wait", "validate-epoch-wait", "active"})


@dataclass(frozen=True)
class Facts:
    """What is known of one assigned partition at one moment (monotonic seconds)."""

    flowing_since: float  # the later of: assigned, last record, kafleet's pause/resume, restart
    held: bool = False  # paused by kafleet, or being revoked: it is meant not to flow
    log_end: int | None = None  # the highest log end known (statistics or the broker)
    position: int | None = None  # the furthest position known (kafleet's, librdkafka's)
    unread: int = 0  # records librdkafka fetched that kafleet has not read yet
    has_leader: bool = True
    lagging_since: float | None = None  # seen behind its log end since, in this quiet stretch


def behind(facts: Facts) -> int | None:
    """How far the partition is behind its log end; None when unknown or not behind."""
    if facts.log_end is None or facts.position is None or facts.log_end <= facts.position:
        return None
    return facts.log_end - facts.position


def lagging_since(previous: float | None, facts: Facts, now: float) -> float | None:
    """When the partition was first seen behind in this quiet stretch (None: it is not)."""
    if behind(facts) is None:
        return None
    return now if previous is None else previous


def _may_stall(facts: Facts) -> bool:
    return not facts.held and facts.has_leader and not facts.unread


def stalled(facts: Mapping[TP, Facts], now: float, timeout_s: float) -> dict[TP, int]:
    """The partitions that stall now, each with how far it is behind."""
    result = {}
    for tp, fact in facts.items():
        lag = behind(fact)
        if lag is None or not _may_stall(fact) or now - fact.flowing_since < timeout_s:
            continue
        if fact.lagging_since is None or now - fact.lagging_since < timeout_s / 2:
            continue
        result[tp] = lag
    return result


def to_ask(
    facts: Mapping[TP, Facts], now: float, timeout_s: float, asked: Mapping[TP, float]
) -> list[TP]:
    """Partitions quiet for half the bound whose lag only the broker can tell (no lag known:
    librdkafka's log end stops moving when its fetcher does), asked at most once every half
    bound; the longest unasked first."""
    half = timeout_s / 2
    wanted = [
        tp
        for tp, fact in facts.items()
        if _may_stall(fact)
        and behind(fact) is None
        and now - fact.flowing_since >= half
        and now - asked.get(tp, -float("inf")) >= half
    ]
    return sorted(wanted, key=lambda tp: asked.get(tp, -float("inf")))


def choose_action(attempt: int, fetch_state: str | None, offset: int | None) -> Action:
    """How to restart a stalled fetch: ``seek`` first when the fetcher was started and the
    offset to go on from is known, otherwise, and on every later attempt, ``reassign``."""
    if attempt == 0 and offset is not None and fetch_state in STARTED:
        return "seek"
    return "reassign"


@dataclass
class Episode:
    """One stall of one partition, from its detection until it flows again."""

    detected_at: float
    lag: int
    restarts: int = 0
    restarted_at: float | None = None
    action: Action | None = None


@dataclass
class Plan:
    """What ``settle`` decided: new stalls, fetches to restart, stalls over."""

    detected: list[TP] = field(default_factory=list)
    restart: list[TP] = field(default_factory=list)
    recovered: list[TP] = field(default_factory=list)
    dropped: list[TP] = field(default_factory=list)


def settle(
    episodes: dict[TP, Episode],
    facts: Mapping[TP, Facts],
    last_record: Mapping[TP, float],
    now: float,
    timeout_s: float,
) -> Plan:
    """Advance the episodes (in place) by what is known now and plan the restarts.

    An episode ends *recovered* when a record of its partition arrived after its detection
    or its lag is gone (log end and position known, nothing beyond), and is *dropped* when the
    partition is no longer assigned or kafleet holds it (a revoke, the drain, the hold: no
    longer a question of fetching). A new stall opens an episode and restarts at once; an
    open one restarts again ``timeout_s`` after its last restart."""
    plan = Plan()
    for tp in list(episodes):
        episode, fact = episodes[tp], facts.get(tp)
        if fact is None or fact.held:
            plan.dropped.append(tp)
        elif last_record.get(tp, -float("inf")) > episode.detected_at or _caught_up(fact):
            plan.recovered.append(tp)
        else:
            lag = behind(fact)
            episode.lag = episode.lag if lag is None else lag
            last = episode.restarted_at
            if last is None or now - last >= timeout_s:
                plan.restart.append(tp)
            continue
        del episodes[tp]
    for tp, lag in stalled(facts, now, timeout_s).items():
        if tp not in episodes and tp not in plan.recovered:
            episodes[tp] = Episode(now, lag)
            plan.detected.append(tp)
            plan.restart.append(tp)
    return plan


def _caught_up(fact: Facts) -> bool:
    return fact.log_end is not None and fact.position is not None and behind(fact) is None


def restarted(
    episodes: Mapping[TP, Episode], done: Iterable[tuple[TP, Action]], now: float
) -> None:
    """Note the restarts carried out (the clock of the next one starts now)."""
    for tp, action in done:
        episode = episodes.get(tp)
        if episode is not None:
            episode.restarts += 1
            episode.restarted_at = now
            episode.action = action
