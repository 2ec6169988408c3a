"""``kafleet worker`` ends every configuration mistake the same clean way: a message naming the
field (or the file), exit code 2, no traceback; wherever the mistake is found (the file, the
environment, the handler's import, the consumer's own checks at start)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO

KAFLEET = Path(sys.executable).with_name("kafleet")  # the console script users run
GOOD = "bootstrap_servers: 127.0.0.1:9\ngroup_id: billing\ntopics: [orders]\n"


@dataclass(frozen=True)
class Run:
    code: int
    output: str


def kafleet_worker(cwd: Path, *args: str, env: dict[str, str] | None = None) -> Run:
    """The real command, as a user types it, in ``cwd``; stdout and stderr together."""
    assert KAFLEET.exists(), f"{KAFLEET} is missing: run make venv"
    done = subprocess.run(
        [str(KAFLEET), "worker", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )
    return Run(done.returncode, done.stdout + done.stderr)


def assert_clean_config_error(run: Run, *named: str) -> None:
    assert "Traceback" not in run.output, run.output
    assert run.code == 2, run.output
    assert "kafleet worker: invalid" in run.output, run.output
    for name in named:
        assert name in run.output, run.output


MISTAKES = {
    "yaml-syntax": (GOOD.replace("[orders]", "[orders") + "handler: json:dumps\n", "line 4"),
    "unknown-field": (GOOD + "handler: json:dumps\nconcurrancy: 4\n", "concurrancy"),
    "wrong-type": (GOOD + "handler: json:dumps\nconcurrency: lots\n", "concurrency"),
    "list-for-a-number": (GOOD + "handler: json:dumps\nqueue: {max_records: [1]}\n", "queue"),
    "exactly-once-without-spark": (
        GOOD + "handler: json:dumps\nguarantee: exactly-once\n",
        "guarantee",
    ),
    "exactly-once-with-a-job-and-no-table": (
        GOOD + "handler: json:dumps\nguarantee: exactly-once\nspark: {job: 'json:dumps'}\n",
        "spark.table",
    ),
    "handler-that-does-not-import": (GOOD + "handler: no_such_module:bill\n", "handler"),
    "handler-not-module-function": (GOOD + "handler: bill\n", "handler"),
    "handler-missing": (GOOD, "handler"),
    "handler-module-with-a-syntax-error": (GOOD + "handler: broken_handler:bill\n", "handler"),
    "not-a-mapping": ("- just\n- a list\n", "mapping"),
    # librdkafka alone knows its properties' types: judged at start, before any connection
    "kafka-value-librdkafka-refuses": (
        GOOD + "handler: json:dumps\nkafka: {fetch.wait.max.ms: abc}\n",
        "kafka.fetch.wait.max.ms",
    ),
    "kafka-property-librdkafka-does-not-know": (
        GOOD + "handler: json:dumps\nkafka: {fetch.wait.max.msec: 100}\n",
        "kafka.fetch.wait.max.msec",
    ),
}


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_a_mistake_in_the_config_file_ends_with_the_field_named_and_exit_code_2(
    mistake: str, tmp_path: Path
) -> None:
    text, named = MISTAKES[mistake]
    (tmp_path / "broken_handler.py").write_text("def bill(record)\n    pass\n")
    path = tmp_path / "worker.yaml"
    path.write_text(text)

    run = kafleet_worker(tmp_path, "--config", str(path))

    assert_clean_config_error(run, named)


def test_a_yaml_syntax_error_names_the_file_and_the_line(tmp_path: Path) -> None:
    path = tmp_path / "worker.yaml"
    path.write_text(GOOD.replace("[orders]", "[orders"))

    run = kafleet_worker(tmp_path, "--config", str(path))

    assert_clean_config_error(run, str(path), "line 3")
    assert "<unicode string>" not in run.output


def test_a_missing_config_file_is_named(tmp_path: Path) -> None:
    run = kafleet_worker(tmp_path, "--config", "nowhere.yaml")

    assert_clean_config_error(run, "nowhere.yaml", "--config")


def test_a_bad_flag_value_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "worker.yaml"
    path.write_text(GOOD + "handler: json:dumps\n")

    run = kafleet_worker(tmp_path, "--config", str(path), "--max-poll-records", "0")

    assert_clean_config_error(run, "max_poll_records")


def test_a_bad_environment_variable_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "worker.yaml"
    path.write_text(GOOD + "handler: json:dumps\n")

    run = kafleet_worker(tmp_path, "--config", str(path), env={"KAFLEET_QUEUE": "{not json"})

    assert_clean_config_error(run, "queue", "KAFLEET_QUEUE")


@pytest.mark.parametrize(
    ("before", "now"),
    [
        ("kafleet.config_doc", "kafleet.config.doc"),
        ("kafleet.metrics", "kafleet.sidecar.metrics"),
        ("kafleet_operator.crd", "kafleet_operator.policy.crd"),
    ],
)
def test_the_commands_readme_gave_before_the_packages_print_what_they_print_now(
    before: str, now: str
) -> None:
    def output(module: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", module], capture_output=True, text=True, cwd=REPO, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert output(before) == output(now) != ""
