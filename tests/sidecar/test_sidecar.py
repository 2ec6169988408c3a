"""A real worker process and a real sidecar process, against the real broker (and a real
Prometheus): the sidecar tells the truth when the worker is well, slow, hung, killed, not yet
started or stopped, and its metrics carry the lag the admin API reports."""

from __future__ import annotations

import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import TopicFactory
from tests.infra.prometheus import start_prometheus
from tests.infra.records import ProduceReport
from tests.infra.waiting import wait_until
from tests.sidecar.conftest import get

Worker = Callable[..., subprocess.Popen[bytes]]


def metric(text: str, name: str, **labels: str) -> float | None:
    """The value of one sample of the Prometheus text ``text``."""
    for line in text.splitlines():
        named = line.startswith((name + "{", name + " "))
        if named and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_metrics_carry_the_lag_the_admin_api_reports_and_a_hung_handler_turns_healthz_red(
    kafka: str,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    group_id: Callable[[], str],
    worker: Worker,
    sidecar: Callable[..., str],
    tmp_path: Path,
    committed_offsets: Callable[[str, str, int], dict[int, int]],
    end_offsets: Callable[[str, int], dict[int, int]],
) -> None:
    topic, group = topic_factory(partitions=2), group_id()
    state, hold = tmp_path / "state" / "state.json", tmp_path / "hold"

    def lag_by_admin_api() -> dict[int, int]:
        ends, committed = end_offsets(topic, 2), committed_offsets(group, topic, 2)
        return {p: ends[p] - committed[p] for p in ends}

    produce(topic, 40, partition=0)
    produce(topic, 40, partition=1, start=40)
    worker(
        topic,
        group,
        tmp_path / "done.txt",
        "--state-file",
        str(state),
        "--processing-timeout-s",
        "3",
        env={"KAFLEET_TEST_HOLD": str(hold)},
    )
    url = sidecar(state)
    wait_until(lambda: lag_by_admin_api() == {0: 0, 1: 0}, 60, "all committed")

    hold.touch()  # from now on every record hangs in its handler
    produce(topic, 25, partition=0, start=80)
    produce(topic, 25, partition=1, start=105)

    def lag(partition: int) -> float | None:
        return metric(
            get(url + "/metrics")[1],
            "kafleet_partition_lag_records",
            group=group,
            topic=topic,
            partition=str(partition),
        )

    wait_until(lambda: lag(0) == 25 and lag(1) == 25, 30, "a lag of 25 on both partitions")
    assert lag_by_admin_api() == {0: 25, 1: 25}

    wait_until(lambda: get(url + "/healthz")[0] == 503, 15, "/healthz to fail")
    body = get(url + "/healthz")[1]
    assert f"{topic}[0]: a record has been in its handler" in body
    assert "processing_timeout_s 3" in body
    # /metrics answers while the worker hangs; its page may be a second older than /healthz's answer
    wait_until(
        lambda: metric(get(url + "/metrics")[1], "kafleet_healthy", group=group) == 0,
        5,
        "kafleet_healthy 0 on /metrics",
    )
    status, text = get(url + "/metrics")
    assert status == 200
    assert metric(text, "kafleet_partition_in_flight_records", topic=topic, partition="0") == 1

    prometheus = start_prometheus(tmp_path / "prometheus", [url.removeprefix("http://")])
    try:
        query = f'kafleet_partition_lag_records{{topic="{topic}",partition="0"}}'
        wait_until(lambda: prometheus.query(query), 30, "Prometheus to scrape the sidecar")
        [sample] = prometheus.query(query)
        assert float(sample["value"][1]) == 25  # type: ignore[index]
        assert sample["metric"]["group"] == group  # type: ignore[index]
    finally:
        prometheus.stop()
        hold.unlink()


def test_a_killed_worker_turns_healthz_and_readyz_red(
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    group_id: Callable[[], str],
    worker: Worker,
    sidecar: Callable[..., str],
    tmp_path: Path,
) -> None:
    topic, state = topic_factory(partitions=1), tmp_path / "state.json"
    produce(topic, 10)
    proc = worker(topic, group_id(), tmp_path / "done.txt", "--state-file", str(state))
    url = sidecar(state)
    wait_until(lambda: get(url + "/readyz")[0] == 200, 30, "the worker to be ready")

    proc.send_signal(signal.SIGKILL)

    wait_until(lambda: get(url + "/healthz")[0] == 503, 10, "/healthz to fail")
    assert f"the worker process {proc.pid} is gone" in get(url + "/healthz")[1]
    assert get(url + "/readyz")[0] == 503


def test_a_slow_worker_that_keeps_polling_stays_green(
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    group_id: Callable[[], str],
    worker: Worker,
    sidecar: Callable[..., str],
    tmp_path: Path,
) -> None:
    topic, state = topic_factory(partitions=1), tmp_path / "state.json"
    produce(topic, 100)
    worker(
        topic,
        group_id(),
        tmp_path / "done.txt",
        "--state-file",
        str(state),
        "--processing-timeout-s",
        "5",
        "--max-poll-interval-ms",
        "10000",
        "--session-timeout-ms",
        "10000",
        "--drain-timeout-s",
        "2",
        delay=0.4,
    )
    url = sidecar(state)
    wait_until(lambda: get(url + "/readyz")[0] == 200, 30, "the worker to be ready")

    codes = []
    for _ in range(16):  # 8 s, longer than the poll limit and the processing timeout
        codes.append(get(url + "/healthz")[0])
        time.sleep(0.5)

    assert set(codes) == {200}


def test_readyz_follows_the_workers_life_from_not_started_to_stopped(
    topic_factory: TopicFactory,
    group_id: Callable[[], str],
    worker: Worker,
    sidecar: Callable[..., str],
    tmp_path: Path,
) -> None:
    topic, state = topic_factory(partitions=2), tmp_path / "state.json"
    url = sidecar(state)
    assert get(url + "/readyz") == (503, "failing\n- the worker has not started\n")
    assert get(url + "/healthz")[0] == 200  # within the start-up grace

    proc = worker(topic, group_id(), tmp_path / "done.txt", "--state-file", str(state))
    wait_until(lambda: get(url + "/readyz")[0] == 200, 30, "the worker to join its group")
    assert "2 partitions assigned" in get(url + "/readyz")[1]

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    assert get(url + "/readyz")[0] == 503
    assert "the worker stopped" in get(url + "/healthz")[1]


def test_the_sidecar_takes_no_tuning_over_http_the_configmap_is_the_one_way(
    sidecar: Callable[..., str], tmp_path: Path
) -> None:
    state = tmp_path / "state.json"
    url = sidecar(state)
    request = urllib.request.Request(url + "/tune?max_poll_records=33&concurrency=5", method="POST")

    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=5)

    assert refused.value.code == 405
    assert refused.value.headers["Allow"] == "GET"
    assert "tune through the ConsumerGroup" in refused.value.read().decode()
    assert not state.with_name("tuning.json").exists()
