"""The watched config file: a rejected change is reported (in the state, so on the sidecar's
/status and metrics) and the running configuration stays; the watch goes on, so the next good
change is applied. Edited as Kubernetes edits a ConfigMap volume (a new folder, then the
``..data`` symlink swapped) and as a person rewrites a file in place."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from kafleet import ParallelConsumer, load_config
from kafleet.cli.live_config import ConfigWatcher
from kafleet.health.state_file import read_json
from tests.conftest import TopicFactory
from tests.infra.records import ProduceReport
from tests.infra.waiting import wait_until

Worker = Callable[..., subprocess.Popen[bytes]]


def configmap_volume(folder: Path, name: str, text: str) -> Path:
    """A folder laid out as the kubelet mounts a ConfigMap: ``name`` -> ``..data/name``,
    ``..data`` -> a timestamped folder holding the real file. Returns the path users read."""
    folder.mkdir(parents=True, exist_ok=True)
    configmap_update(folder, name, text)
    (folder / name).symlink_to(Path("..data") / name)
    return folder / name


def configmap_update(folder: Path, name: str, text: str) -> None:
    """What the kubelet's atomic writer does on a change: write a new timestamped folder, point
    ``..data_tmp`` at it, rename that over ``..data``, remove the old folder."""
    stamp = datetime.now().strftime("..%Y_%m_%d_%H_%M_%S.%f")
    (folder / stamp).mkdir()
    (folder / stamp / name).write_text(text)
    old = os.readlink(folder / "..data") if (folder / "..data").is_symlink() else None
    (folder / "..data_tmp").symlink_to(stamp)
    os.rename(folder / "..data_tmp", folder / "..data")
    if old is not None:
        for leftover in (folder / old).iterdir():
            leftover.unlink()
        (folder / old).rmdir()


def rewrite(path: Path, text: str) -> None:
    """An edit in place, as an editor or ``cat >`` does it."""
    with open(path, "w") as file:
        file.write(text)


TUNED = "max_poll_records: {records}\nqueue:\n  max_records: {bound}\n"


@pytest.fixture
def watched(
    kafka: str, topic_factory: TopicFactory, group_id: Callable[[], str], tmp_path: Path
) -> Iterator[Callable[[Path], tuple[ParallelConsumer, ConfigWatcher]]]:
    """``watched(path)``: a consumer started from the file at ``path`` (against the session's
    broker) and a watcher of that file applying changes to it, as ``kafleet worker`` wires
    them; both stopped after the test."""
    started: list[tuple[ParallelConsumer, ConfigWatcher]] = []

    def start(path: Path) -> tuple[ParallelConsumer, ConfigWatcher]:
        overrides = {"bootstrap_servers": kafka, "group_id": group_id(), "topics": topic_factory()}
        config = load_config(path, overrides)
        consumer = ParallelConsumer(config, lambda record: None).start()
        watcher = ConfigWatcher(
            path,
            config,
            lambda live: consumer.tune(**live),
            overrides,
            interval_s=0.05,
            stats=consumer.stats,
        ).start()
        started.append((consumer, watcher))
        return consumer, watcher

    yield start
    for consumer, watcher in started:
        watcher.stop()
        consumer.stop(grace_s=5)
        consumer.wait(timeout=30)


def test_a_configmap_change_the_running_queue_cannot_take_is_reported_and_the_next_one_applies(
    watched: Callable[[Path], tuple[ParallelConsumer, ConfigWatcher]], tmp_path: Path
) -> None:
    path = configmap_volume(
        tmp_path / "config", "worker.yaml", TUNED.format(records=100, bound=1000)
    )
    consumer, watcher = watched(path)

    # queue.max_records needs a restart, so the running bound (1000) stays: 4000 cannot apply.
    configmap_update(tmp_path / "config", "worker.yaml", TUNED.format(records=4000, bound=5000))
    wait_until(lambda: consumer.snapshot()["config_rejections"] == 1, 10, "the rejection")

    rejected = consumer.snapshot()
    assert "max_poll_records" in rejected["config_rejected"]
    assert "1000" in rejected["config_rejected"]
    assert rejected["max_poll_records"] == 100
    assert watcher.watching

    configmap_update(tmp_path / "config", "worker.yaml", TUNED.format(records=300, bound=1000))
    wait_until(lambda: consumer.snapshot()["max_poll_records"] == 300, 10, "the next change")

    applied = consumer.snapshot()
    assert applied["config_rejected"] is None
    assert applied["config_rejections"] == 1


def test_a_file_rewritten_in_place_with_mistakes_is_reported_each_time_and_then_applies(
    watched: Callable[[Path], tuple[ParallelConsumer, ConfigWatcher]], tmp_path: Path
) -> None:
    path = tmp_path / "worker.yaml"
    path.write_text(TUNED.format(records=100, bound=1000))
    consumer, _ = watched(path)

    rewrite(path, "max_poll_records: [100\n")
    wait_until(lambda: consumer.snapshot()["config_rejections"] == 1, 10, "the YAML rejection")
    assert "not valid YAML" in consumer.snapshot()["config_rejected"]

    rewrite(path, TUNED.format(records=2000, bound=1000))
    wait_until(lambda: consumer.snapshot()["config_rejections"] == 2, 10, "the bound rejection")
    assert (
        "max_poll_records: must not exceed queue.max_records"
        in (consumer.snapshot()["config_rejected"])
    )

    rewrite(path, TUNED.format(records=250, bound=1000) + "concurrency: 7\n")
    wait_until(lambda: consumer.snapshot()["max_poll_records"] == 250, 10, "the good rewrite")

    applied = consumer.snapshot()
    assert applied["concurrency"] == 7
    assert applied["config_rejected"] is None
    assert applied["config_rejections"] == 2


def test_a_worker_process_reports_a_rejected_change_in_its_state_and_applies_the_next(
    topic_factory: TopicFactory,
    group_id: Callable[[], str],
    produce: Callable[..., ProduceReport],
    worker: Worker,
    tmp_path: Path,
) -> None:
    """The real ``kafleet worker``, its ConfigMap-mounted file and the state file the sidecar
    serves as /status (and turns into kafleet_config_rejected*)."""
    topic, state_file = topic_factory(partitions=2), tmp_path / "state" / "state.json"
    path = configmap_volume(
        tmp_path / "config", "worker.yaml", TUNED.format(records=100, bound=1000)
    )
    flags = ["--config", str(path), "--state-file", str(state_file)]
    proc = worker(topic, group_id(), tmp_path / "done.txt", *flags)

    def state() -> dict[str, Any]:
        return read_json(state_file) or {}

    wait_until(lambda: state().get("joined"), 30, "the worker to join")
    configmap_update(tmp_path / "config", "worker.yaml", TUNED.format(records=4000, bound=5000))
    wait_until(lambda: state().get("config_rejections") == 1, 15, "the rejection in the state")
    assert "max_poll_records" in state()["config_rejected"]

    configmap_update(tmp_path / "config", "worker.yaml", TUNED.format(records=300, bound=1000))
    wait_until(lambda: state().get("max_poll_records") == 300, 15, "the next change applied")
    assert state()["config_rejected"] is None

    produce(topic, 50)  # and it still works
    wait_until(
        lambda: (
            len((tmp_path / "done.txt").read_text().splitlines()) >= 50
            if (tmp_path / "done.txt").exists()
            else False
        ),
        30,
        "50 records handled",
    )
    assert proc.poll() is None
