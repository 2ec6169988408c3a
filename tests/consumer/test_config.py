"""Configuration is validated once, names the bad field, and never prints a secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafleet.cli.live_config import config_changes
from kafleet.config.doc import markdown
from kafleet.config.loading import load_config
from kafleet.config.model import ConsumerConfig
from kafleet.errors import ConfigError

BASE = {"bootstrap_servers": "localhost:9092", "group_id": "billing", "topics": ["orders"]}


def test_file_then_environment_then_flags_each_override_the_one_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "worker.yaml"
    path.write_text(
        "bootstrap_servers: file:9092\ngroup_id: from-file\ntopics: [a, b]\n"
        "concurrency: 4\nqueue:\n  max_records: 200\n"
    )
    monkeypatch.setenv("KAFLEET_CONCURRENCY", "8")
    monkeypatch.setenv("KAFLEET_QUEUE__MAX_BYTES", "2048")

    config = load_config(path, {"group_id": "from-flag"})

    assert config.group_id == "from-flag"
    assert config.concurrency == 8
    assert config.queue.max_records == 200
    assert config.queue.max_bytes == 2048
    assert config.topics == ["a", "b"]


def test_topics_may_be_a_comma_separated_string_from_an_environment_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KAFLEET_TOPICS", "orders, refunds")

    config = load_config(None, {"bootstrap_servers": "b:1", "group_id": "g"})

    assert config.topics == ["orders", "refunds"]


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        ({"concurrency": 0}, "concurrency", "greater than or equal to 1"),
        ({"ordering": "random"}, "ordering", "'partition', 'key' or 'unordered'"),
        ({"topics": []}, "topics", "exactly one of topics and topic_pattern"),
        ({"topic_pattern": "orders-("}, "topic_pattern", "not a regular expression"),
        ({"queue": {"max_records": 10}, "max_poll_records": 50}, "max_poll_records", "must not"),
        ({"retry": {"initial_backoff_ms": 500, "max_backoff_ms": 100}}, "retry", "max_backoff_ms"),
        ({"kafka": {"enable.auto.commit": True}}, "kafka", "set by kafleet"),
        ({"kafka": {"sasl.password": "x"}}, "kafka", "security.*"),
        ({"drain_timeout_s": 200.0}, "drain_timeout_s", "half of max_poll_interval_ms"),
        (
            {"group_protocol": "consumer", "session_timeout_ms": 10000},
            "session_timeout_ms",
            "broker",
        ),
        ({"security": {"protocol": "SASL_SSL"}}, "security", "sasl_mechanism is required"),
        ({"max_poll_interval_ms": 5000}, "session_timeout_ms", "must not exceed"),
        ({"unknown_field": 1}, "unknown_field", "Extra inputs are not permitted"),
        ({"fetch_stall_timeout_ms": -1}, "fetch_stall_timeout_ms", "greater than or equal to 0"),
        ({"fetch_stall_timeout_ms": 500}, "fetch_stall_timeout_ms", "0 (the watch off) or at"),
        (
            {"fetch_stall_timeout_ms": 5000, "statistics_interval_ms": 0},
            "fetch_stall_timeout_ms",
            "needs librdkafka's statistics",
        ),
        (
            {"fetch_stall_timeout_ms": 5000, "statistics_interval_ms": 3000},
            "fetch_stall_timeout_ms",
            "at least twice statistics_interval_ms (3000)",
        ),
    ],
)
def test_a_bad_value_is_rejected_naming_the_field_and_the_reason(
    change: dict[str, object], field: str, reason: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(None, {**BASE, **change})

    assert field in caught.value.fields
    assert reason in str(caught.value)


def test_the_fetch_stall_watch_is_on_by_default_and_off_with_0_or_without_statistics() -> None:
    from kafleet.engine.fetch_watch import FetchWatch
    from kafleet.health.state import Stats

    def bound(**fields: object) -> int:
        config = load_config(None, {**BASE, **fields})
        return FetchWatch(config, Stats(), lambda tp: False, lambda c, tps: []).timeout_ms

    assert bound() == 60_000
    assert bound(fetch_stall_timeout_ms=5000, statistics_interval_ms=2500) == 5000
    assert bound(statistics_interval_ms=45_000) == 90_000  # the default stretches to fit
    assert bound(fetch_stall_timeout_ms=0) == 0
    assert bound(statistics_interval_ms=0) == 0  # the default: no statistics, no watch
    assert "--fetch-stall-timeout-ms" in markdown()


def test_a_file_that_is_not_yaml_is_rejected_with_the_file_named(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("topics: [orders\n")

    with pytest.raises(ConfigError, match=r"broken\.yaml.*\n.*not valid YAML"):
        load_config(path)


def test_secrets_are_masked_wherever_the_configuration_is_printed() -> None:
    config = load_config(
        None,
        {
            **BASE,
            "security": {
                "protocol": "SASL_SSL",
                "sasl_mechanism": "SCRAM-SHA-512",
                "sasl_username": "svc",
                "sasl_password": "hunter2",
            },
        },
    )

    assert "hunter2" not in str(config)
    assert "hunter2" not in repr(config)
    assert "hunter2" not in str(config.masked())
    assert config.librdkafka()["sasl.password"] == "hunter2"


def test_a_secret_in_a_rejected_value_is_not_echoed() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(None, {**BASE, "security": {"sasl_password": ["hunter2"]}})

    assert "hunter2" not in str(caught.value)


def test_classic_protocol_renders_cooperative_sticky_and_kip848_leaves_it_to_the_broker() -> None:
    classic = load_config(None, BASE).librdkafka()
    kip848 = load_config(None, {**BASE, "group_protocol": "consumer"}).librdkafka()

    assert classic["partition.assignment.strategy"] == "cooperative-sticky"
    assert classic["enable.auto.commit"] is False
    assert kip848["group.protocol"] == "consumer"
    assert "partition.assignment.strategy" not in kip848
    assert "session.timeout.ms" not in kip848


def test_a_fetch_at_the_log_end_is_held_100_ms_unless_the_kafka_section_says_otherwise() -> None:
    assert load_config(None, BASE).librdkafka()["fetch.wait.max.ms"] == 100
    own = load_config(None, {**BASE, "kafka": {"fetch.wait.max.ms": 500}}).librdkafka()
    assert own["fetch.wait.max.ms"] == 500


def test_only_tunable_fields_change_live_and_the_rest_are_named_for_a_restart() -> None:
    old = ConsumerConfig(**BASE)
    new = ConsumerConfig(**{**BASE, "concurrency": 64, "max_poll_records": 100, "ordering": "key"})

    live, restart = config_changes(old, new)

    assert live == {"concurrency": 64, "max_poll_records": 100}
    assert restart == ["ordering"]


def test_the_worker_takes_no_secret_on_its_command_line() -> None:
    import argparse

    from kafleet.cli.worker import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    flags = {flag for action in parser._actions for flag in action.option_strings}

    assert "--security.sasl-username" in flags
    assert not [flag for flag in flags if "password" in flag]


@pytest.mark.parametrize(
    ("spark", "field", "reason"),
    [
        ({}, "spark", "give table"),
        ({"table": "/t", "remote": "http://x"}, "spark.remote", "sc://"),
        ({"table": "/t", "job": "not a reference"}, "spark.job", "pattern"),
        ({"table": "/t", "batch": {"max_records": 9000}}, "spark.batch.max_records", "queue"),
        ({"table": "/t", "writers": 0}, "spark.writers", "greater than or equal to 1"),
    ],
)
def test_a_bad_spark_section_names_the_field(
    spark: dict[str, object], field: str, reason: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(None, {**BASE, "spark": spark})

    assert field in caught.value.fields
    assert reason in str(caught.value)


def test_spark_jars_may_be_a_comma_separated_string_from_an_environment_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KAFLEET_SPARK__TABLE", "/lake/orders")
    monkeypatch.setenv("KAFLEET_SPARK__JARS", "/jars/a.jar, /jars/b.jar")

    config = load_config(None, BASE)

    assert config.spark is not None
    assert config.spark.jars == ["/jars/a.jar", "/jars/b.jar"]


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        ({"guarantee": "exactly-once"}, "guarantee", "spark.table"),
        (
            {"guarantee": "exactly-once", "spark": {"job": "jobs:write"}},
            "spark.table",
            "exactly-once",
        ),
        ({"handler": "bill"}, "handler", "pattern"),
        ({"handler": "orders:bill:now"}, "handler", "pattern"),
        ({"dead_letter_topic": "orders dlq"}, "dead_letter_topic", "pattern"),
        ({"group_id": "billing team"}, "dead_letter_topic", "not a valid topic name"),
    ],
)
def test_the_model_itself_refuses_what_the_worker_could_not_run(
    change: dict[str, object], field: str, reason: str
) -> None:
    """So the CRD made from the model, the operator and the worker judge a spec the same way."""
    with pytest.raises(ConfigError) as caught:
        load_config(None, {**BASE, **change})

    assert field in caught.value.fields
    assert reason in str(caught.value)


def test_a_group_id_that_is_no_topic_name_is_fine_with_a_dead_letter_topic_named_or_no_dlq() -> (
    None
):
    ConsumerConfig(**{**BASE, "group_id": "billing team", "dead_letter_topic": "billing.dlq"})
    ConsumerConfig(**{**BASE, "group_id": "billing team", "on_failure": "stop-partition"})


def test_exactly_once_with_a_sink_passed_in_code_that_stores_no_offsets_is_refused() -> None:
    """The one rule the configuration cannot know: what a sink given in code can do."""
    from kafleet import ParallelConsumer

    config = load_config(
        None, {**BASE, "guarantee": "exactly-once", "spark": {"table": "/lake/orders"}}
    )

    class ListSink:  # writes batches to a list: it cannot say where a partition resumes
        max_batches_per_write = 1

        def rows(self, record: object, result: object) -> list[dict[str, object]]:
            return [{"result": result}]

        def prepare(self, batch: object) -> object:
            return batch

        def write(self, prepared: list[object]) -> None:
            pass

    with pytest.raises(ConfigError) as caught:
        ParallelConsumer(config, lambda record: None, sink=ListSink())

    assert caught.value.fields == ("guarantee",)
    assert "offset_store" in str(caught.value)
