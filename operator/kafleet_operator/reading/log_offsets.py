"""The log-end (or log-start) offsets of many partitions, read honestly while leaders move.

Owns: asking an admin client's ``list_offsets`` for many partitions (``CHUNK`` a call, every
call in flight together, each call's request bounded by ``TRY_S``); what each partition's
answer means (``answer``: an offset, or a ``Failure`` that names the partition's leader); and
asking again, within the same read, the partitions whose failure came from the client's stale
view of their leader (``ask_again``, after the caller's ``refresh`` of the cluster's metadata),
at most ``TRIES`` calls.

Why a negative offset is a failure: librdkafka (2.16, and its master as of this writing) fills
every partition of a ListOffsets with ``RD_KAFKA_OFFSET_INVALID`` (-1001) and no error before
it asks the leaders (``src/rdkafka_admin.c``, ``rd_kafka_ListOffsets_leaders_queried_cb``), and
merges each leader's answer without looking at its request's error
(``rd_kafka_ListOffsets_response_merge``, where ``rd_kafka_DeleteRecords_response_merge`` sets
the error on every partition of a request that failed). A leader that is down (SIGKILLed, not
yet fenced by the controller: about 9 to 12 s) leaves its partitions at -1001 with no error:
counted, that is a lag of 0 for each of them.

Why the metadata is asked again: librdkafka takes each partition's leader *and* the leader
epoch it sends (``CurrentLeaderEpoch``) from its metadata cache
(``src/rdkafka_partition.c``, ``rd_kafka_topic_partition_list_get_leaders``), and refreshes
that cache after a ListOffsets only on ``NOT_LEADER_OR_FOLLOWER`` and ``LEADER_NOT_AVAILABLE``
(``src/rdkafka_admin.c``, ``rd_kafka_admin_result_err_refresh``): not after a dead leader's
silence, nor after ``FENCED_LEADER_EPOCH`` (a leader moved and moved back: the broker that
returned after a kill, a preferred-leader election). Left alone the client asks the old leader
with the old epoch until something else refreshes its cache (a reconnect, our metadata's
``METADATA_TTL_S``, 60 s): 8 to 29 s of "Leader epoch is older than broker epoch", measured on
a three-broker cluster after a broker's return and after a preferred-leader election.

Does not own the metadata nor the leaders it names (``clusters.View``: ``refresh``), nor what a
failure means for a group's lag (``lag_reader.py``: unknown, never zero).
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from kafleet_operator.reading.snapshots import TP, Failure

# Partitions per list_offsets call: librdkafka matches each partition to its leader's request
# and each answer to the partitions asked in loops over the whole list (n squared in one
# call's size, by reading its source; not measured alone). In chunks of 500: 16 requests a
# pass at 1,000 groups of 8 partitions instead of one (B9 measured them, with the rest).
CHUNK = 500
# One call's request timeout. A leader that is up answers in milliseconds; a request to one
# that is down waits this long (librdkafka holds it until the broker is back or it times out),
# and every partition of the same call waits with it (its answer is one for all leaders).
TRY_S = 3.0
TRIES = 3  # calls per read, at most: the first and two after a move
MARGIN_S = 0.5  # past a call's request timeout, the wait for librdkafka's own answer
RETRY_S = 0.2  # between a refresh of the metadata and the next call
# The leader's words when the client's metadata is behind the cluster's: asked again after a
# refresh even when the metadata names the same leader (it has a newer epoch), or a new leader
# that has not yet learnt the high watermark.
STALE = frozenset(
    {
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.OFFSET_NOT_AVAILABLE,
    }
)
NO_ANSWER = KafkaError.LEADER_NOT_AVAILABLE  # the code of a partition answered with no offset


class Admin(Protocol):
    """What is used of an ``AdminClient``."""

    def list_offsets(
        self, topic_partition_offsets: dict[TopicPartition, Any], **kwargs: Any
    ) -> dict[TopicPartition, concurrent.futures.Future[Any]]: ...


def answer(tp: TP, offset: int, leader: int | None) -> int | Failure:
    """A partition's offset as answered, or the failure a negative one is (the latest and the
    earliest offsets are never negative: librdkafka made it up for a leader that did not
    answer). ``leader``: the node the metadata named, if known."""
    if offset >= 0:
        return offset
    who = f"its leader (broker {leader})" if leader is not None and leader >= 0 else "its leader"
    return Failure(NO_ANSWER, f"{who} did not answer for {tp[0]}[{tp[1]}] (offset {offset})")


def ask_again(failure: Failure, leader_before: int | None, leader_now: int | None) -> bool:
    """Whether a partition that failed is asked again in the same read, once the metadata was
    asked again: the leader said the client's view was behind (``STALE``), or the metadata
    now names another leader than the one asked. Not a leader that is the same (still down,
    not yet fenced) or none (no replica in sync): asking it again costs another ``TRY_S``."""
    if failure.code in STALE:
        return True
    return leader_now is not None and leader_now >= 0 and leader_now != leader_before


def read(
    admin: Admin,
    tps: Sequence[TP],
    spec: Any,
    until: float,
    leaders: Mapping[TP, int],
    refresh: Callable[[float], Mapping[TP, int]],
) -> tuple[dict[TP, int], dict[TP, Failure]]:
    """``tps``' offsets (``spec``: ``OffsetSpec.latest()`` or ``earliest()``) and the failures
    of those that could not be read, by ``until`` (``time.monotonic()``). ``leaders``: each
    partition's leader as the metadata last said; ``refresh(until)``: ask the metadata again
    (it updates the client's cache), the leaders it names (raises ``KafkaException`` when the
    cluster cannot be asked: the failures stand)."""
    found: dict[TP, int] = {}
    failed: dict[TP, Failure] = {}
    pending = list(tps)
    for tries in range(1, TRIES + 1):
        asked = dict(leaders)
        got, lost = _ask(admin, pending, spec, until, asked)
        found.update(got)
        failed.update(lost)
        if not lost or tries == TRIES or time.monotonic() + RETRY_S >= until:
            break
        try:
            leaders = refresh(until)
        except KafkaException:
            break
        pending = [tp for tp in lost if ask_again(lost[tp], asked.get(tp), leaders.get(tp))]
        if not pending:
            break
        for tp in pending:
            del failed[tp]
        time.sleep(RETRY_S)
    return found, failed


def _ask(
    admin: Admin, tps: Sequence[TP], spec: Any, until: float, leaders: Mapping[TP, int]
) -> tuple[dict[TP, int], dict[TP, Failure]]:
    """One round: every chunk's call in flight together, each partition's answer read."""
    timeout = max(0.1, min(TRY_S, until - time.monotonic()))
    answered_by = time.monotonic() + timeout + MARGIN_S
    futures: dict[TopicPartition, concurrent.futures.Future[Any]] = {}
    for first in range(0, len(tps), CHUNK):
        asked = {TopicPartition(t, p): spec for t, p in tps[first : first + CHUNK]}
        futures.update(admin.list_offsets(asked, request_timeout=timeout))
    found: dict[TP, int] = {}
    failed: dict[TP, Failure] = {}
    for tp, future in futures.items():
        key = (tp.topic, tp.partition)
        try:
            offset = future.result(timeout=max(0.1, answered_by - time.monotonic())).offset
        except KafkaException as exc:
            failed[key] = Failure.of(exc)
            continue
        except concurrent.futures.TimeoutError:
            failed[key] = Failure(KafkaError._TIMED_OUT, f"no answer in {timeout:.0f} s")
            continue
        result = answer(key, offset, leaders.get(key))
        if isinstance(result, Failure):
            failed[key] = result
        else:
            found[key] = result
    return found, failed
