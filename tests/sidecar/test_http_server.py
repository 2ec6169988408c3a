"""The sidecar's HTTP server on its own: a silent or slow client cannot hold it, it keeps an
HTTP/1.1 client's connection, and it answers on IPv6 and IPv4 alike; a real ``kafleet sidecar``
process, no worker needed (its kept-alive connections in detail: ``test_keepalive.py``)."""

from __future__ import annotations

import errno
import http.client
import os
import socket
import socketserver
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from kafleet.sidecar import http_serving
from tests.infra.waiting import wait_until
from tests.sidecar.conftest import Sidecars, get, trickle


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def threads_of(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def silent_client(port: int) -> socket.socket:
    """A client that connects and sends nothing."""
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def test_a_client_that_sends_nothing_is_cut_off_and_does_not_hold_the_server(
    sidecar: Sidecars, tmp_path: Path
) -> None:
    url = sidecar(tmp_path / "state.json", "--http-timeout-s", "1")
    # From an address of its own: the fixture's last probe may still count against
    # 127.0.0.1's share of connections (2) on a busy machine.
    silent = socket.create_connection(
        ("127.0.0.1", port_of(url)), timeout=10, source_address=("127.0.0.2", 0)
    )

    started = time.monotonic()
    assert get(url + "/healthz", timeout=2)[0] == 200  # another client, meanwhile
    assert time.monotonic() - started < 1

    silent.settimeout(5)
    started = time.monotonic()
    assert silent.recv(100) == b""  # the server closed it
    assert time.monotonic() - started < 3
    silent.close()


def test_a_client_trickling_its_request_is_cut_off_at_the_deadline(
    sidecar: Sidecars, tmp_path: Path
) -> None:
    url = sidecar(tmp_path / "state.json", "--http-timeout-s", "1")
    slow = silent_client(port_of(url))
    started = time.monotonic()
    closed = trickle(slow, [b"GET /heal", b"thz HT", b"TP/1.0\r\n", b"X-A: b\r\n"] * 3)
    slow.settimeout(5)
    answer = b"" if closed else slow.recv(100)

    assert closed or answer == b""
    assert time.monotonic() - started < 4
    slow.close()


def test_the_sidecar_answers_a_kept_alive_client_on_one_connection(
    sidecar: Sidecars, tmp_path: Path
) -> None:
    url = sidecar(tmp_path / "state.json")
    kept = http.client.HTTPConnection("127.0.0.1", port_of(url), timeout=5)
    answered = []
    for path in ("/healthz", "/readyz", "/status", "/metrics", "/nowhere"):
        kept.request("GET", path)
        response = kept.getresponse()
        response.read()
        answered.append((response.status, response.version, response.will_close))
        if path == "/healthz":
            first = kept.sock

    assert [status for status, _, _ in answered] == [200, 503, 200, 200, 404]
    assert {(version, closes) for _, version, closes in answered} == {(11, False)}
    assert kept.sock is first  # never closed and opened again
    kept.close()


def healthy(url: str) -> bool:
    try:
        return get(url + "/healthz", timeout=2)[0] == 200
    except OSError:  # a timeout while it is still full
        return False


def test_many_silent_clients_cannot_exhaust_the_threads_and_the_rest_are_told_busy(
    sidecar: Sidecars, tmp_path: Path
) -> None:
    url = sidecar(tmp_path / "state.json", "--http-timeout-s", "2", "--http-workers", "2")
    pid = sidecar.pid(url)
    before = threads_of(pid)

    clients = [silent_client(port_of(url)) for _ in range(60)]
    time.sleep(0.5)
    during = threads_of(pid)
    status, body = get(url + "/healthz", timeout=2)  # two handlers held, eight waiting: full

    # The main thread, the accept loop, the parked connections' watcher, the two handlers.
    assert during <= before <= 3 + 2
    assert (status, body) == (503, "busy: every handler is taken, try again\n")
    # The silent ones are cut off at their deadline (2 s after acceptance; a busy machine
    # may add a little), and the server answers again.
    wait_until(lambda: healthy(url), 10, "the server to answer /healthz again")
    for client in clients:
        client.close()


def test_the_sidecar_answers_on_ipv6_and_ipv4_loopback_by_default(
    sidecar: Sidecars, tmp_path: Path
) -> None:
    url = sidecar(tmp_path / "state.json", host=None)
    port = port_of(url)

    assert get(f"http://[::1]:{port}/healthz")[0] == 200
    assert get(f"http://127.0.0.1:{port}/healthz")[0] == 200


class Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()


class SocketModule:
    """``socketserver``'s view of the ``socket`` module, with ``socket()`` replaced."""

    def __init__(self, factory: Any) -> None:
        self.socket = factory

    def __getattr__(self, name: str) -> Any:
        return getattr(socket, name)


def test_where_the_kernel_has_no_ipv6_the_server_listens_on_ipv4(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = socket.socket

    def no_ipv6(family: int = socket.AF_INET, *args: Any, **kwargs: Any) -> socket.socket:
        if family == socket.AF_INET6:
            raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol")
        return real(family, *args, **kwargs)

    monkeypatch.setattr(socketserver, "socket", SocketModule(no_ipv6))
    server = http_serving.listen("::", 0, Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert server.server_address[0] == "0.0.0.0"
        assert get(f"http://127.0.0.1:{server.server_address[1]}/")[0] == 200
    finally:
        server.shutdown()
        server.server_close()


def test_one_clients_idle_connections_do_not_starve_the_kubelets_probes(
    sidecar: Sidecars, tmp_path: Path
) -> None:
    """Review of issue 21: twenty idle connections from one pod made /healthz answer 503 to
    everyone, and the kubelet restarts a worker whose probe fails. A client holds at most its
    share; the node's address (here 127.0.0.2) is still answered."""
    url = sidecar(tmp_path / "state.json", "--http-timeout-s", "5")
    port = port_of(url)
    idle = [silent_client(port) for _ in range(20)]
    time.sleep(0.5)

    probe = socket.create_connection(
        ("127.0.0.1", port), timeout=2, source_address=("127.0.0.2", 0)
    )
    probe.sendall(b"GET /healthz HTTP/1.0\r\nHost: sidecar\r\n\r\n")
    answer = probe.recv(200).decode()

    assert answer.startswith("HTTP/1.1 200"), answer  # an HTTP/1.0 request, answered
    for client in [probe, *idle]:
        client.close()
