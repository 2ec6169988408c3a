"""The rules that span a ``ConsumerConfig``'s fields: which combinations are refused, and why.

Owns: ``config_problems``, every rule across fields as (field, reason) pairs, in a fixed order
(``ConsumerConfig`` joins them into one error; ``config_error`` makes a ``FieldProblem`` of
each): topics or a pattern; the group protocol's and a revoke's timeouts against the poll
interval; the fetch-stall bound against the statistics it reads; a poll within the queue's
bound; what exactly-once asks of the Spark sink, and idempotent writes of its rows; a valid
default dead-letter topic; a Spark batch within the queue's bound. Also ``TOPIC_NAME``, the
topic names Kafka accepts (``dead_letter_topic`` is checked against it too).

Does not own: the settings, their bounds and the derived values the rules read
(``config/model.py``), a share group's own rules (``share_problems`` in ``config/share.py``,
which ``config_problems`` includes), or the rules within one section (``RetryPolicy``,
``SparkSettings``, ``Security``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from kafleet.config.share import share_problems

if TYPE_CHECKING:
    from kafleet.config.model import ConsumerConfig

# Kafka's legal topic names.
TOPIC_NAME = r"^[a-zA-Z0-9._-]{1,249}$"


def config_problems(config: ConsumerConfig) -> Iterator[tuple[str, str]]:
    """The rules across fields, as (field, reason) pairs; ``ConsumerConfig`` judges them."""
    if bool(config.topics) == bool(config.topic_pattern):
        yield "topics", "give exactly one of topics and topic_pattern"
    if config.group_type == "share":
        yield from share_problems(config)
    if config.group_protocol == "consumer" and "session_timeout_ms" in config.model_fields_set:
        yield (
            "session_timeout_ms",
            ("the broker sets it with group_protocol consumer (KIP-848), so leave it out"),
        )
    if config.drain_timeout_s * 1000 >= config.max_poll_interval_ms / 2:
        yield (
            "drain_timeout_s",
            ("must be under half of max_poll_interval_ms, or a revoke could outlast it"),
        )
    if (
        config.group_protocol == "classic"
        and config.session_timeout_ms > config.max_poll_interval_ms
    ):
        yield "session_timeout_ms", "must not exceed max_poll_interval_ms"
    yield from _fetch_stall_problems(config)
    explicit = "max_poll_records" in config.model_fields_set  # the default is capped anyway
    if explicit and config.max_poll_records > config.queue.max_records:
        yield "max_poll_records", "must not exceed queue.max_records"
    if config.guarantee == "exactly-once" and config.spark is None:
        yield (
            "guarantee",
            "exactly-once needs spark with spark.table: the Delta table that stores the "
            "offsets with the output",
        )
    if config.guarantee == "exactly-once" and config.spark and config.spark.table is None:
        yield (
            "spark.table",
            "exactly-once needs it, with spark.job too: the worker resumes from that Delta "
            "table's log",
        )
    if config.guarantee == "exactly-once" and config.spark and config.spark.idempotent is False:
        yield "spark.idempotent", "exactly-once needs idempotent writes: leave it unset"
    spark = config.spark
    if config.idempotent_writes and spark and not spark.coordinates and not spark.job:
        yield (
            "spark.coordinates",
            "idempotent writes replace each batch's range of offsets by the "
            "kafka_* columns: keep them",
        )
    dead_letters = config.effective_dead_letter_topic
    if config.on_failure == "dead-letter" and not re.fullmatch(TOPIC_NAME, dead_letters):
        yield (
            "dead_letter_topic",
            f"the default {dead_letters!r} (group_id + '.dlq') is not a valid topic name "
            "(letters, digits, '.', '_', '-'): name one",
        )
    if config.spark is not None and config.spark.batch.max_records > config.queue.max_records:
        yield (
            "spark.batch.max_records",
            f"must not exceed queue.max_records ({config.queue.max_records}): results "
            "waiting for their batch count against the partition's queue",
        )


def _fetch_stall_problems(config: ConsumerConfig) -> Iterator[tuple[str, str]]:
    """The watch over fetching (``engine/fetch_watch.py``) judges librdkafka's statistics: it
    needs them, fresh within the bound. Checked when the bound is given; the default stretches
    to twice the statistics interval, and with statistics off the watch is off."""
    bound = config.fetch_stall_timeout_ms
    if "fetch_stall_timeout_ms" not in config.model_fields_set or bound == 0:
        return
    if bound < 1000:
        yield "fetch_stall_timeout_ms", "give 0 (the watch off) or at least 1000"
    elif config.statistics_interval_ms == 0:
        yield (
            "fetch_stall_timeout_ms",
            "needs librdkafka's statistics (statistics_interval_ms above 0: they tell a fetcher "
            "that stopped from one past a transaction marker); give 0 to turn the watch off",
        )
    elif bound < 2 * config.statistics_interval_ms:
        yield (
            "fetch_stall_timeout_ms",
            f"must be at least twice statistics_interval_ms ({config.statistics_interval_ms}): "
            "each judgement needs a fresh reading of librdkafka's statistics",
        )
