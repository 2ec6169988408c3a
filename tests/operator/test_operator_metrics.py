"""The operator's own metrics: every counter has a series from a group's first pass (at 0), a gauge
once its value is known (a lag that cannot be read is withdrawn), the figures of a pass follow
its status, decisions are counted, a gone group's series go, the exposition passes ``promtool
check metrics``, and a bad ``--metrics-address`` stops the operator with a message naming the
flag."""

from __future__ import annotations

import socket
import subprocess
import sys
from typing import Any

import pytest
from prometheus_client import generate_latest

from kafleet import __version__
from kafleet_operator.reconcile import metrics, observer
from tests.infra import prometheus


def _sample(name: str, **labels: str) -> float | None:
    return metrics.REGISTRY.get_sample_value(name, labels)


GROUP = {"namespace": "shop", "consumergroup": "billing", "group": "billing-v2"}


@pytest.fixture
def series() -> Any:
    memo: dict[str, Any] = {}
    made = metrics.series(memo, "shop", "billing", "billing-v2")
    yield made
    made.close()


def test_a_groups_first_pass_gives_every_counter_a_series_at_zero(series: Any) -> None:
    assert _sample("kafleet_operator_passes_total", **GROUP, result="ok") == 0
    assert _sample("kafleet_operator_passes_total", **GROUP, result="error") == 0
    assert _sample("kafleet_operator_scale_events_total", **GROUP, direction="up") == 0
    assert _sample("kafleet_operator_scale_events_total", **GROUP, direction="down") == 0
    assert _sample("kafleet_operator_lag_read_failures_total", **GROUP) == 0
    assert _sample("kafleet_operator_tuning_changes_total", **GROUP) == 0
    assert _sample("kafleet_operator_pass_duration_seconds_count", **GROUP) == 0


def test_the_operator_says_its_version_whether_or_not_it_has_groups() -> None:
    assert _sample("kafleet_operator_build_info", version=__version__) == 1


def test_reconciles_are_counted_by_result_from_a_groups_first_pass(series: Any) -> None:
    where = {"namespace": "shop", "consumergroup": "billing"}
    for result in metrics.RECONCILE_RESULTS:
        assert _sample("kafleet_operator_reconciles_total", **where, result=result) == 0
    metrics.reconciled("shop", "billing", "applied")
    metrics.reconciled("shop", "billing", "refused")
    assert _sample("kafleet_operator_reconciles_total", **where, result="applied") == 1
    assert _sample("kafleet_operator_reconciles_total", **where, result="refused") == 1
    series.close()
    assert _sample("kafleet_operator_reconciles_total", **where, result="applied") is None


def test_a_gauge_has_no_series_until_its_value_is_known(series: Any) -> None:
    for gauge in ("lag_records", "time_lag_seconds", "replicas_desired", "max_poll_records"):
        assert _sample(f"kafleet_operator_{gauge}", **GROUP) is None, gauge


def test_a_lag_that_cannot_be_read_withdraws_the_last_one_read(series: Any) -> None:
    series.passed({"lag": 1234, "timeLagSeconds": 7.5}, 0.1, True)
    series.lag_unreadable()
    assert _sample("kafleet_operator_lag_records", **GROUP) is None
    assert _sample("kafleet_operator_time_lag_seconds", **GROUP) is None
    series.passed({"lag": 10}, 0.1, True)
    assert _sample("kafleet_operator_lag_records", **GROUP) == 10


def test_a_group_made_again_under_its_name_keeps_its_series_when_the_old_one_closes() -> None:
    old_memo: dict[str, Any] = {}
    new_memo: dict[str, Any] = {}
    metrics.series(old_memo, "shop", "again", "g").passed({"lag": 5}, 0.1, True)
    metrics.series(new_memo, "shop", "again", "g").passed({"lag": 7}, 0.1, True)
    old_memo["metrics"].close()  # the old group's forget runs after the new one's first pass
    labels = {"namespace": "shop", "consumergroup": "again", "group": "g"}
    assert _sample("kafleet_operator_lag_records", **labels) == 7
    assert _sample("kafleet_operator_passes_total", **labels, result="ok") == 2
    new_memo["metrics"].close()
    assert _sample("kafleet_operator_passes_total", **labels, result="ok") is None


def test_the_old_group_of_a_name_that_fails_to_read_lag_leaves_the_new_ones_lag_exported() -> None:
    old_memo: dict[str, Any] = {}
    new_memo: dict[str, Any] = {}
    metrics.series(old_memo, "shop", "again", "g").passed({"lag": 5}, 0.1, True)
    made = metrics.series(new_memo, "shop", "again", "g")
    made.passed({"lag": 7}, 0.1, True)
    old_memo["metrics"].lag_unreadable()  # the old group's last pass
    made.passed({"lag": 9}, 0.1, True)
    labels = {"namespace": "shop", "consumergroup": "again", "group": "g"}
    assert _sample("kafleet_operator_lag_records", **labels) == 9
    made.close()


def test_a_pass_at_rest_is_counted_apart_and_not_timed(series: Any) -> None:
    series.rested()
    assert _sample("kafleet_operator_passes_total", **GROUP, result="at_rest") == 1
    assert _sample("kafleet_operator_pass_duration_seconds_count", **GROUP) == 0


def test_a_pass_sets_the_figures_its_status_shows(series: Any) -> None:
    status = {"lag": 1234, "timeLagSeconds": 7.5, "readyReplicas": 3, "maxPollRecords": 200}
    series.passed(status, 0.12, True, desired=4)
    assert _sample("kafleet_operator_lag_records", **GROUP) == 1234
    assert _sample("kafleet_operator_time_lag_seconds", **GROUP) == 7.5
    assert _sample("kafleet_operator_replicas_ready", **GROUP) == 3
    assert _sample("kafleet_operator_replicas_desired", **GROUP) == 4
    assert _sample("kafleet_operator_max_poll_records", **GROUP) == 200
    assert _sample("kafleet_operator_passes_total", **GROUP, result="ok") == 1
    assert _sample("kafleet_operator_pass_duration_seconds_count", **GROUP) == 1


def test_decisions_and_failures_are_counted(series: Any) -> None:
    series.scaled(1, 5)
    series.scaled(5, 2)
    series.lag_unreadable()
    series.tuned()
    assert _sample("kafleet_operator_scale_events_total", **GROUP, direction="up") == 1
    assert _sample("kafleet_operator_scale_events_total", **GROUP, direction="down") == 1
    assert _sample("kafleet_operator_replicas_desired", **GROUP) == 2
    assert _sample("kafleet_operator_lag_read_failures_total", **GROUP) == 1
    assert _sample("kafleet_operator_tuning_changes_total", **GROUP) == 1


def test_a_pass_that_raises_counts_as_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: Any) -> None:
        raise RuntimeError("the apiserver is down")

    monkeypatch.setattr(observer, "observe", broken)
    memo: dict[str, Any] = {}
    body = {"metadata": {"namespace": "shop", "name": "billing"}, "spec": {"group_id": "g1"}}
    with pytest.raises(RuntimeError):
        observer.observe_group(body, memo)
    labels = {"namespace": "shop", "consumergroup": "billing", "group": "g1"}
    assert _sample("kafleet_operator_passes_total", **labels, result="error") == 1
    memo["metrics"].close()


@pytest.mark.parametrize(
    ("annotations", "desired", "paused"),
    [
        ({}, 4, 0),
        ({"kafleet.io/paused-replicas": "1"}, 1, 1),
        ({"kafleet.io/pause-reconciliation": "true"}, 4, 1),
    ],
)
def test_a_pass_gives_the_replicas_the_deployment_is_held_at_and_whether_it_is_paused(
    monkeypatch: pytest.MonkeyPatch, annotations: dict[str, str], desired: int, paused: int
) -> None:
    monkeypatch.setattr(observer, "observe", lambda *_: None)
    memo: dict[str, Any] = {}
    meta = {"namespace": "shop", "name": "held", "annotations": annotations}
    observer.observe_group({"metadata": meta, "spec": {"group_id": "h", "replicas": 4}}, memo)
    labels = {"namespace": "shop", "consumergroup": "held", "group": "h"}
    assert _sample("kafleet_operator_replicas_desired", **labels) == desired
    assert _sample("kafleet_operator_paused", **labels) == paused
    memo["metrics"].close()


def test_a_gone_group_leaves_no_series() -> None:
    memo: dict[str, Any] = {}
    metrics.series(memo, "shop", "gone", "g").passed({"lag": 5}, 0.1, True)
    memo["metrics"].close()
    text = generate_latest(metrics.REGISTRY).decode()
    assert 'consumergroup="gone"' not in text


def test_a_new_group_id_replaces_the_groups_series() -> None:
    memo: dict[str, Any] = {}
    metrics.series(memo, "shop", "renamed", "old-id")
    metrics.series(memo, "shop", "renamed", "new-id")
    text = generate_latest(metrics.REGISTRY).decode()
    assert 'group="old-id"' not in text
    assert 'group="new-id"' in text
    memo["metrics"].close()


def test_the_exposition_passes_promtool(series: Any) -> None:
    series.passed({"lag": 3}, 0.05, True, desired=1)
    done = subprocess.run(
        [prometheus.promtool(), "check", "metrics"],
        input=generate_latest(metrics.REGISTRY),
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("0.0.0.0:8081", ("0.0.0.0", 8081)),
        ("[::]:9000", ("::", 9000)),
        (":8081", ("0.0.0.0", 8081)),
        ("off", None),
    ],
)
def test_metrics_addresses_are_read(text: str, parsed: tuple[str, int] | None) -> None:
    assert metrics.parse_address(text) == parsed


@pytest.mark.parametrize("text", ["8081", "localhost:http", "host:0", "host:70000", ""])
def test_a_bad_metrics_address_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="host:port"):
        metrics.parse_address(text)


def _operator(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kafleet", "operator", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_operator_refuses_a_bad_metrics_address_naming_the_flag() -> None:
    done = _operator("--metrics-address", "nowhere")
    assert done.returncode == 2, done.stderr
    assert "--metrics-address nowhere" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_operator_stops_when_its_metrics_port_is_taken() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _operator("--metrics-address", f"127.0.0.1:{port}")
    assert done.returncode == 2, done.stderr
    assert f"--metrics-address 127.0.0.1:{port}" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
