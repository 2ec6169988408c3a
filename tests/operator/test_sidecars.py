"""Which pods' sidecars the operator asks, and at which address: only ready pods that are not
terminating count, and an IPv6 address is bracketed (unbracketed, every request failed and
tuning was silently dead on IPv6 clusters); kafleet's own sidecar is read over one connection
of the operator's pool, kept between passes, and a busy one is left out, not guessed from."""

from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import Any, cast

import kopf
import pytest

from kafleet.sidecar import http_serving
from kafleet.sidecar.server import Sidecar, serve
from kafleet_operator.policy import builders
from kafleet_operator.reading import sidecars, watched


def pod(ip: str | None = "10.0.0.7", ready: bool = True, terminating: bool = False) -> kopf.Body:
    """A group's pod as the operator's watch of pods sees it."""
    meta: dict[str, Any] = {
        "name": "orders-abc",
        "namespace": "shop",
        "labels": builders.labels("orders"),
    }
    if terminating:
        meta["deletionTimestamp"] = "2026-11-26T07:00:00Z"
    status: dict[str, Any] = {
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]
    }
    if ip:
        status["podIP"] = ip
    return kopf.Body(cast(kopf.RawBody, {"metadata": meta, "status": status}))


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("10.0.0.7", "http://10.0.0.7:8080"),
        ("fd00::7", "http://[fd00::7]:8080"),
        ("2001:db8::1", "http://[2001:db8::1]:8080"),
    ],
)
def test_a_sidecar_url_brackets_an_ipv6_address(address: str, expected: str) -> None:
    assert sidecars.url(address, "p", "http://{pod_ip}:8080") == expected


def test_a_sidecar_url_template_may_name_the_pod() -> None:
    assert sidecars.url("10.0.0.7", "p-1", "http://{pod}.svc:8080") == "http://p-1.svc:8080"


def test_a_ready_running_pod_counts() -> None:
    assert watched.pod_kept(pod()) == {("shop", "orders"): ("10.0.0.7", "orders-abc")}


@pytest.mark.parametrize(
    "candidate",
    [pod(ready=False), pod(terminating=True), pod(ip=None)],
    ids=["unready", "terminating", "without-address"],
)
def test_unready_terminating_or_unaddressed_pods_do_not_count(candidate: kopf.Body) -> None:
    """Review of issue 22: ``None`` left a pod that went unready or began terminating in the
    index (kopf keeps the last entry), so its sidecar was still asked; an empty result
    takes it out."""
    assert watched.pod_kept(candidate) == {}


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> sidecars.http_pool.Pool:
    """The module's state emptied for the test, and its own pool of connections."""
    pool = sidecars.http_pool.Pool(per_host=sidecars.PARALLEL)
    monkeypatch.setattr(sidecars, "_connections", pool)
    monkeypatch.setattr(sidecars, "_silent", {})
    monkeypatch.setattr(sidecars, "_recent", {})
    return pool


def one_pod(monkeypatch: pytest.MonkeyPatch, port: int) -> None:
    """The group shop/orders has one ready pod, orders-abc, whose sidecar listens on ``port``."""
    monkeypatch.setitem(
        watched._indexes, "pods", {("shop", "orders"): [("127.0.0.1", "orders-abc")]}
    )
    monkeypatch.setattr(sidecars, "SIDECAR_URL", f"http://{{pod_ip}}:{port}")


def test_kafleets_sidecar_is_read_over_one_kept_connection(
    monkeypatch: pytest.MonkeyPatch, fresh: sidecars.http_pool.Pool, tmp_path: Path
) -> None:
    """The sidecar keeps HTTP/1.1 connections: three passes, one connection opened by the
    operator and one accepted by the sidecar, kept between the passes."""
    server = serve(Sidecar(tmp_path / "state.json"), "127.0.0.1", 0)
    one_pod(monkeypatch, server.server_address[1])
    try:
        passes = []
        for _ in range(3):
            monkeypatch.setattr(sidecars, "_recent", {})  # the next pass
            passes.append(sidecars.read("shop", "orders"))
        accepted = server.accepted
    finally:
        server.shutdown()
        server.server_close()

    assert [[r.pod for r in found] for found in passes] == [["orders-abc"]] * 3
    assert set(passes[0][0].status) >= {"healthy", "ready", "worker"}
    assert fresh.opened == accepted == 1
    assert fresh.kept() == 1


def test_a_busy_sidecar_is_left_out_and_not_asked_again_for_a_while(
    monkeypatch: pytest.MonkeyPatch, fresh: sidecars.http_pool.Pool
) -> None:
    """A ``503`` (the sidecar's answer when its handlers are taken) is no answer, as before
    the connections were kept: never guessed from."""
    busy = socket.create_server(("127.0.0.1", 0))
    one_pod(monkeypatch, busy.getsockname()[1])

    def answer_busy() -> None:
        connection, _ = busy.accept()
        connection.recv(65536)
        connection.sendall(http_serving.BUSY)
        connection.close()

    thread = threading.Thread(target=answer_busy, daemon=True)
    thread.start()
    try:
        found = sidecars.read("shop", "orders")
        thread.join(5)
        monkeypatch.setattr(sidecars, "_recent", {})
        again = sidecars.read("shop", "orders")  # not asked: left alone for SILENT_S
    finally:
        busy.close()

    assert found == again == []
    assert "orders-abc" in sidecars._silent
    assert fresh.opened == 1
