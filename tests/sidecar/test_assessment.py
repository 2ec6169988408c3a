"""Liveness and readiness judged from the worker's state: hung, slow, crashed, not started."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kafleet.health.assessment import liveness, readiness
from kafleet.sidecar.server import Sidecar

NOW = 1_000_000.0


def state(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "written_at": NOW - 0.5,
        "seconds_since_poll": 0.05,
        "max_poll_interval_ms": 60_000,
        "processing_timeout_s": 30.0,
        "joined": True,
        "assigned": ["t[0]"],
        "stopped": False,
        "pid": 4242,
        "partitions": {"t[0]": {"oldest_in_flight_s": 1.0}},
    }
    return {**base, **changes}


def live(s: dict[str, Any] | None, **kwargs: Any) -> tuple[bool, str]:
    verdict = liveness(s, NOW, started_at=NOW - 5, **kwargs)
    return verdict.ok, verdict.body()


def test_a_polling_worker_with_records_under_the_timeout_is_live_and_ready() -> None:
    assert live(state())[0]
    assert readiness(state(), NOW).ok


def test_a_slow_worker_that_still_polls_is_live() -> None:
    slow = state(partitions={"t[0]": {"oldest_in_flight_s": 25.0}}, seconds_since_poll=0.1)

    assert live(slow)[0]


def test_a_record_past_processing_timeout_fails_liveness_naming_the_partition() -> None:
    ok, body = live(state(partitions={"t[3]": {"oldest_in_flight_s": 31.0}}))

    assert not ok
    assert "t[3]: a record has been in its handler for 31.5 s" in body
    assert "processing_timeout_s 30" in body


def test_a_stale_state_file_counts_as_time_without_a_poll() -> None:
    hung = state(written_at=NOW - 40)  # a frozen worker writes nothing any more

    ok, body = live(hung)

    assert not ok
    assert "no poll for 40.0 s" in body
    assert "limit 30 s" in body


def test_a_worker_whose_process_is_gone_fails_at_once_when_the_sidecar_can_see_it() -> None:
    ok, body = live(state(), pid_alive=lambda pid: False)

    assert not ok
    assert "process 4242 is gone" in body
    assert live(state(), pid_alive=None)[0]  # another pid namespace: the file decides
    assert not readiness(state(), NOW, pid_alive=lambda pid: False).ok


def test_a_worker_not_started_yet_is_live_during_the_grace_but_not_ready() -> None:
    assert live(None, startup_grace_s=60)[0]
    assert not live(None, startup_grace_s=3)[0]
    assert "not started" in readiness(None, NOW).body()


def test_a_stopped_worker_is_neither_live_nor_ready() -> None:
    assert not live(state(stopped=True))[0]
    assert not readiness(state(stopped=True), NOW).ok


def test_a_fatal_error_fails_liveness() -> None:
    ok, body = live(state(fatal_error="KafkaClientError: fenced"))

    assert not ok
    assert "fenced" in body


def test_readiness_needs_a_fresh_state_and_a_group() -> None:
    assert not readiness(state(written_at=NOW - 11), NOW, stale_after_s=10).ok
    assert "not joined" in readiness(state(joined=False), NOW).body()
    idle = state(assigned=[])  # more members than partitions: idle, and rightly ready
    assert readiness(idle, NOW).ok


def test_a_record_hung_in_the_handler_of_a_partition_no_longer_assigned_is_not_live() -> None:
    ok, body = live(state(oldest_abandoned_s=31.0))

    assert not ok
    assert "no longer assigned" in body


def stall(restarts: int) -> dict[str, Any]:
    return {
        "fetch_stall_timeout_ms": 60_000,
        "stalled_partitions": {
            "t[2]": {
                "topic": "t",
                "partition": 2,
                "lag": 340,
                "quiet_s": 70.0,
                "restarts": restarts,
            }
        },
    }


def test_a_partition_that_fetches_nothing_makes_the_worker_unready_naming_it_but_still_live() -> (
    None
):
    verdict = readiness(state(**stall(restarts=1)), NOW)

    assert not verdict.ok
    assert verdict.reasons == [
        "t[2] fetches nothing: 340 records behind its log end and no record for 70.5 s, since "
        "1970-01-12T13:45:29Z (fetch_stall_timeout_ms 60000); its fetch restarted 1 time "
        "(librdkafka#5586)"
    ]
    assert live(state(**stall(restarts=2)))[0]  # the worker is restarting that fetch itself


def test_a_partition_still_stalled_after_three_restarts_of_its_fetch_fails_liveness() -> None:
    ok, body = live(state(**stall(restarts=3)))

    assert not ok
    assert "- t[2] fetches nothing: 340 records behind its log end" in body
    assert "although its fetch was restarted 3 times: a restart of the worker is the cure" in body


def test_a_worker_with_no_stalled_partition_or_an_older_one_without_the_key_is_unaffected() -> None:
    assert readiness(state(stalled_partitions={}), NOW).ok
    assert readiness(state(), NOW).ok
    assert live(state(stalled_partitions={}))[0]


def test_a_partition_this_worker_has_committed_nothing_on_is_not_judged_stalled(
    tmp_path: Path,
) -> None:
    """A worker restarted on a caught-up group commits nothing: its partitions said STALL,
    then STOP (the lag read as the whole log, never moving), and the STOP alert fired on an
    idle, healthy worker. Until it commits, a partition has no lag status, as it has no lag."""
    sidecar = Sidecar(tmp_path / "state.json", lag_window=3, stop_after_s=0.0)
    idle = {"topic": "orders", "partition": 0, "committed": None, "log_end": 75}
    for at in range(5):
        assert sidecar.sample({"written_at": float(at), "partitions": {"orders[0]": idle}}) == {}
    stuck = {**idle, "committed": 10}
    for at in range(5, 10):
        found = sidecar.sample({"written_at": float(at), "partitions": {"orders[0]": stuck}})
    assert found["orders[0]"] in ("STALL", "STOP")  # once it has committed, it is judged
