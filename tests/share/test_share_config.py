"""A share-group configuration that cannot work is refused before anything starts, each
mistake naming its field (and only its field): orderings a share group cannot keep,
exactly-once, a topic pattern, static membership, stopping a partition, a lock beyond an hour,
idempotent Spark writes, the share section's own bounds; a missing Java client names
``share.classpath``; a batch handler names ``handler``; the worker exits 2 with the field named
and no traceback. No broker: nothing here gets as far as connecting."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Message

from kafleet import ConfigError, ConsumerConfig, ParallelConsumer, batch_handler, load_config
from kafleet.config.share import java_properties, lock_ms
from kafleet.share.share_consumer import ShareConsumer
from tests.conftest import REPO
from tests.consumer.test_cli import Run, assert_clean_config_error

NOWHERE = "127.0.0.1:9"  # nothing listens: a client made here never reaches a broker
SHARE: dict[str, Any] = {
    "bootstrap_servers": NOWHERE,
    "group_id": "billing",
    "topics": ["orders"],
    "group_type": "share",
}


def kafleet_worker(cwd: Path, *args: str) -> Run:
    """``kafleet worker`` as ``python -m kafleet``, with this session's ``PYTHONPATH`` after
    the repository (so the checkout under test is the one that runs)."""
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-m", "kafleet", "worker", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=60,
    )
    return Run(done.returncode, done.stdout + done.stderr)


def _share(**fields: Any) -> ConsumerConfig:
    return load_config(None, {**SHARE, **fields})


def _refused(**fields: Any) -> ConfigError:
    with pytest.raises(ConfigError) as refused:
        _share(**fields)
    return refused.value


RULES: dict[str, tuple[dict[str, Any], str]] = {
    "key-ordering": ({"ordering": "key"}, "ordering"),
    "partition-ordering": ({"ordering": "partition"}, "ordering"),
    "exactly-once": (
        {"guarantee": "exactly-once", "spark": {"table": "/tmp/t", "job": "json:dumps"}},
        "guarantee",
    ),
    "topic-pattern": ({"topics": [], "topic_pattern": "orders-.*"}, "topic_pattern"),
    "static-membership": ({"group_instance_id": "worker-0"}, "group_instance_id"),
    "stop-partition": ({"on_failure": "stop-partition"}, "on_failure"),
    "a-lock-beyond-an-hour": ({"processing_timeout_s": 3601}, "processing_timeout_s"),
    "idempotent-spark-writes": (
        {"spark": {"idempotent": True, "job": "json:dumps"}},
        "spark.idempotent",
    ),
    "one-delivery": ({"share": {"delivery_limit": 1}}, "share.delivery_limit"),
    "too-many-deliveries": ({"share": {"delivery_limit": 26}}, "share.delivery_limit"),
    "no-consumers": ({"share": {"consumers": 0}}, "share.consumers"),
    "too-many-consumers": ({"share": {"consumers": 65}}, "share.consumers"),
    "an-unknown-acquire-mode": ({"share": {"acquire_mode": "greedy"}}, "share.acquire_mode"),
    "an-unknown-dead-letter-ack": ({"share": {"dead_letter_ack": "drop"}}, "share.dead_letter_ack"),
    "an-unknown-share-setting": ({"share": {"lock_ms": 5000}}, "share.lock_ms"),
}


@pytest.mark.parametrize("rule", list(RULES))
def test_every_share_rule_names_its_field_and_only_that(rule: str) -> None:
    fields, named = RULES[rule]

    refused = _refused(**fields)

    assert refused.fields == (named,), refused


def test_the_share_rules_say_why_in_share_group_terms() -> None:
    refused = _refused(ordering="key", group_instance_id="w-0", on_failure="stop-partition")

    reasons = {problem.field: problem.reason for problem in refused.problems}
    assert set(reasons) == {"ordering", "group_instance_id", "on_failure"}
    assert "share group" in reasons["ordering"]
    assert "unordered" in reasons["ordering"]
    assert "static membership" in reasons["group_instance_id"]
    assert "dead-letter" in reasons["on_failure"]


def test_unordered_is_the_default_in_share_mode_only() -> None:
    assert _share().ordering == "unordered"
    assert _share(ordering="unordered").ordering == "unordered"
    consumer_group = load_config(None, {**SHARE, "group_type": "consumer"})
    assert consumer_group.ordering == "partition"


def test_an_hour_of_processing_is_the_longest_lock_a_share_group_takes() -> None:
    config = _share(processing_timeout_s=3600)

    assert lock_ms(config) == 3_600_000


def test_the_lock_follows_processing_timeout_s_or_is_the_brokers_default() -> None:
    assert lock_ms(_share(processing_timeout_s=5)) == 5000
    assert lock_ms(_share(processing_timeout_s=0.2)) == 1000  # the broker's least
    assert lock_ms(_share()) == 30_000


def test_the_java_client_acknowledges_explicitly_with_the_acquire_mode_and_limit() -> None:
    config = _share(share={"acquire_mode": "batch_optimized"}, max_poll_records=7)

    props = java_properties(config, 3)

    assert props["share.acknowledgement.mode"] == "explicit"
    assert props["share.acquire.mode"] == "batch_optimized"
    assert props["max.poll.records"] == "3"  # the member's limit, which tuning changes
    assert props["group.id"] == "billing"
    assert props["bootstrap.servers"] == NOWHERE


@pytest.mark.parametrize("classpath", [None, "", "{tmp}/*", "{tmp}/kafka-clients-4.3.1.jar"])
def test_a_share_consumer_without_the_java_client_names_share_classpath(
    classpath: str | None, tmp_path: Path
) -> None:
    share = {} if classpath is None else {"classpath": classpath.format(tmp=tmp_path)}
    consumer = ShareConsumer(_share(share=share), lambda record: None)

    try:
        with pytest.raises(ConfigError) as refused:
            consumer.start()
    finally:
        consumer.dead_letters.close()

    assert refused.value.fields == ("share.classpath",)
    assert "kafleet share-jars" in str(refused.value)


def test_a_batch_handler_is_refused_naming_handler() -> None:
    @batch_handler
    def bill(messages: list[Message]) -> None:
        return None

    with pytest.raises(ConfigError) as refused:
        ShareConsumer(_share(), bill)

    assert refused.value.fields == ("handler",)


def test_a_parallel_consumer_refuses_a_share_config_naming_group_type() -> None:
    with pytest.raises(ConfigError) as refused:
        ParallelConsumer(_share(), lambda record: None)

    assert refused.value.fields == ("group_type",)
    assert "ShareConsumer" in str(refused.value)


def test_a_share_consumer_refuses_a_consumer_group_config_naming_group_type() -> None:
    config = load_config(None, {**SHARE, "group_type": "consumer"})

    with pytest.raises(ConfigError) as refused:
        ShareConsumer(config, lambda record: None)

    assert refused.value.fields == ("group_type",)


def test_the_worker_refuses_key_ordering_in_a_share_group_with_exit_code_2(
    tmp_path: Path,
) -> None:
    run = kafleet_worker(
        tmp_path,
        "--bootstrap-servers",
        NOWHERE,
        "--group-id",
        "billing",
        "--topics",
        "orders",
        "--handler",
        "json:dumps",
        "--group-type",
        "share",
        "--ordering",
        "key",
    )

    assert_clean_config_error(run, "ordering", "share group")
    assert "(all)" not in run.output


def test_the_worker_without_a_classpath_names_share_classpath_with_exit_code_2(
    tmp_path: Path,
) -> None:
    run = kafleet_worker(
        tmp_path,
        "--bootstrap-servers",
        NOWHERE,
        "--group-id",
        "billing",
        "--topics",
        "orders",
        "--handler",
        "json:dumps",
        "--group-type",
        "share",
        "--share.consumers",
        "2",
    )

    assert_clean_config_error(run, "share.classpath")


def test_a_share_group_defaults_to_a_30_s_timeout_and_polls_of_what_its_handlers_take() -> None:
    config = _share(concurrency=12, share={"consumers": 3})

    assert config.processing_timeout_s == 30.0  # the record lock: brokers take 15-60 s
    assert config.max_poll_records == 4  # concurrency / share.consumers
    consumer_group = load_config(None, {**SHARE, "group_type": "consumer"})
    assert (consumer_group.processing_timeout_s, consumer_group.max_poll_records) == (300.0, 500)


def test_share_consumers_may_not_acquire_more_records_than_the_handlers_take() -> None:
    with pytest.raises(ConfigError) as caught:
        _share(concurrency=8, max_poll_records=4, share={"consumers": 3})

    assert caught.value.fields == ("max_poll_records",)
    assert "(12) must not exceed concurrency (8)" in str(caught.value)


def test_a_property_the_java_client_refuses_names_kafka_at_start(share_classpath: str) -> None:
    config = _share(share={"classpath": share_classpath}, kafka={"fetch.max.bytes": "banana"})

    with pytest.raises(ConfigError) as caught:
        ShareConsumer(config, lambda record: None).start()

    assert caught.value.fields == ("kafka",)
    assert "fetch.max.bytes" in str(caught.value)


def test_the_state_file_is_published_before_the_jvm_starts_and_says_stopped_if_it_fails(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state.json"
    config = _share(state_file=str(state), share={"classpath": str(tmp_path / "nothing/*")})

    with pytest.raises(ConfigError):
        ShareConsumer(config, lambda record: None).start()

    assert json.loads(state.read_text())["stopped"] is True
