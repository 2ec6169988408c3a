"""The sidecar's HTTP server keeps connections for HTTP/1.1 clients without giving up its bounds:
a kept connection serves several answers, holds no handler thread while idle, is closed after
a while and above its caps, and each request on it still has its deadline; HTTP/1.0 and
``Connection: close`` clients get one answer and the connection closed."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from kafleet.sidecar import http_serving
from tests.infra.waiting import wait_until
from tests.sidecar.conftest import trickle

Serving = Callable[..., http_serving.BoundedHTTPServer]


class Hello(BaseHTTPRequestHandler):
    """Answers every GET with ``hello``, and whether Nagle's algorithm is off on its socket."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        nodelay = self.connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        body = f"hello, nodelay {int(bool(nodelay))}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def serving() -> Iterator[Serving]:
    """``serving(**bounds)``: a bounded server of ``Hello`` on 127.0.0.1, stopped after the test."""
    made: list[http_serving.BoundedHTTPServer] = []

    def serve(**bounds: Any) -> http_serving.BoundedHTTPServer:
        server = http_serving.BoundedHTTPServer("127.0.0.1", 0, Hello, **bounds)
        threading.Thread(target=server.serve_forever, args=(0.1,), daemon=True).start()
        made.append(server)
        return server

    yield serve
    for server in made:
        server.shutdown()
        server.server_close()


def client(
    server: http_serving.BoundedHTTPServer, source: str = "127.0.0.1"
) -> http.client.HTTPConnection:
    """A client that keeps its connection (HTTP/1.1), from ``source``."""
    return http.client.HTTPConnection(
        "127.0.0.1", server.server_address[1], timeout=5, source_address=(source, 0)
    )


def ask(connection: http.client.HTTPConnection) -> tuple[int, bytes]:
    connection.request("GET", "/")
    response = connection.getresponse()
    return response.status, response.read()


def park_in_turn(server: http_serving.BoundedHTTPServer, *kept: http.client.HTTPConnection) -> None:
    """Each of ``kept`` asks once and is parked before the next asks: their age is their order."""
    target = server.parked()

    def parked() -> bool:
        return server.parked() >= target

    for connection in kept:
        target += 1
        ask(connection)
        wait_until(parked, 5, f"{target} connections parked")


def closed_by_the_server(connection: http.client.HTTPConnection, within_s: float) -> bool:
    """Whether the server closes ``connection`` (between two answers) within ``within_s``."""
    assert connection.sock is not None
    connection.sock.settimeout(within_s)
    try:
        return bool(connection.sock.recv(1) == b"")
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


GET = b"GET / HTTP/1.1\r\nHost: sidecar\r\n\r\n"


def raw(server: http_serving.BoundedHTTPServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=5)


def read_to_the_end(sock: socket.socket) -> bytes:
    data = b""
    while piece := sock.recv(65536):
        data += piece
    return data


def test_a_kept_alive_client_gets_several_answers_on_one_connection(serving: Serving) -> None:
    server = serving()
    kept = client(server)

    answers = [ask(kept) for _ in range(3)]

    assert answers == [(200, b"hello, nodelay 1")] * 3  # and Nagle's algorithm off
    assert server.accepted == 1


def test_an_idle_kept_alive_connection_holds_no_handler_thread(serving: Serving) -> None:
    server = serving(workers=1, per_client=1, timeout_s=5)
    idle = client(server)
    ask(idle)  # then idle: parked, neither on the only thread nor in its client's share
    time.sleep(0.2)  # the thread frees the share just after the answer leaves

    other = client(server)  # from the same address
    started = time.monotonic()
    assert ask(other) == (200, b"hello, nodelay 1")
    assert time.monotonic() - started < 1  # not after the idle one's deadline (5 s)
    time.sleep(0.2)
    assert ask(idle) == (200, b"hello, nodelay 1")  # and the idle one is still kept
    assert server.accepted == 2


def test_a_parked_connection_is_closed_after_the_idle_timeout(serving: Serving) -> None:
    server = serving(idle_s=0.3)
    kept = client(server)
    ask(kept)
    started = time.monotonic()
    wait_until(lambda: server.parked() == 1, 5, "the connection parked")

    assert closed_by_the_server(kept, within_s=3)
    assert server.parked() == 0
    assert 0.25 < time.monotonic() - started < 2


def test_parked_connections_above_a_clients_cap_are_closed_oldest_first(serving: Serving) -> None:
    server = serving(parked_per_client=2)
    oldest, older, newest = client(server), client(server), client(server)
    park_in_turn(server, oldest, older)
    ask(newest)

    assert closed_by_the_server(oldest, within_s=3)
    assert ask(older) == ask(newest) == (200, b"hello, nodelay 1")
    assert server.accepted == 3


def test_parked_connections_above_the_overall_cap_are_closed_oldest_first(
    serving: Serving,
) -> None:
    server = serving(parked_max=2)
    oldest, older, newest = (client(server, f"127.0.0.{n}") for n in (2, 3, 4))
    park_in_turn(server, oldest, older)
    ask(newest)

    assert closed_by_the_server(oldest, within_s=3)
    assert ask(older) == ask(newest) == (200, b"hello, nodelay 1")


def test_a_kept_alive_client_trickling_its_next_request_is_cut_off_at_the_deadline(
    serving: Serving,
) -> None:
    server = serving(timeout_s=1)
    slow = raw(server)
    slow.sendall(GET)
    assert slow.recv(1000).startswith(b"HTTP/1.1 200")
    started = time.monotonic()
    closed = trickle(slow, [b"GET / HT", b"TP/1.1\r\n", b"X-A: b\r\n"] * 3)

    assert closed or read_to_the_end(slow) == b""
    assert time.monotonic() - started < 4
    slow.close()


@pytest.mark.parametrize(
    "request_",
    [
        b"GET / HTTP/1.0\r\n\r\n",
        b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",  # kept only if told so: it is not
        b"GET / HTTP/1.1\r\nHost: sidecar\r\nConnection: close\r\n\r\n",  # the kubelet's probes
    ],
    ids=["http-1.0", "http-1.0-keep-alive", "connection-close"],
)
def test_http_1_0_and_connection_close_clients_get_one_answer_and_the_connection_closed(
    serving: Serving, request_: bytes
) -> None:
    server = serving(idle_s=30)
    once = raw(server)
    once.sendall(request_)

    answer = read_to_the_end(once)  # the server closes: no wait for an idle timeout

    assert answer.startswith(b"HTTP/1.1 200")
    assert answer.count(b"HTTP/1.1") == 1
    assert answer.endswith(b"hello, nodelay 1")
    once.close()


def test_a_request_sent_before_the_answer_to_the_previous_one_is_answered(
    serving: Serving,
) -> None:
    """Pipelined: the second request is read ahead with the first, so parking the connection
    would leave it waiting for data already in the server's buffer."""
    server = serving()
    both = raw(server)
    both.sendall(
        b"GET / HTTP/1.1\r\nHost: sidecar\r\n\r\n"
        b"GET / HTTP/1.1\r\nHost: sidecar\r\nConnection: close\r\n\r\n"
    )

    assert read_to_the_end(both).count(b"hello, nodelay 1") == 2
    both.close()


def test_a_kept_connection_whose_client_holds_its_share_is_told_busy(serving: Serving) -> None:
    server = serving(workers=1, per_client=1, timeout_s=3)
    kept = raw(server)
    kept.sendall(GET)
    assert kept.recv(1000).startswith(b"HTTP/1.1 200")
    time.sleep(0.2)  # the thread frees the share just after the answer leaves
    silent = raw(server)  # from the same address: holds its share, and the only thread
    time.sleep(0.2)

    started = time.monotonic()
    kept.sendall(GET)
    answer = read_to_the_end(kept)  # then closed

    assert answer == http_serving.BUSY
    assert time.monotonic() - started < 1
    for each in (kept, silent):
        each.close()
