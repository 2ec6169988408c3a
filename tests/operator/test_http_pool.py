"""The operator's HTTP client keeps connections alive where the server does, and never longer
than it should: one connection serves every GET of a server that keeps it; a server that closes
after each answer (HTTP/1.0, ``Connection: close``) costs a new one each time and leaves nothing
kept; a kept connection the server closed meanwhile is replaced within the same GET; a slow
server is not asked twice; idle connections are closed after a while and bounded in number."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kafleet_operator.reading import http_pool
from tests.infra.clock import Clock


class Server:
    """An HTTP server on the loopback address that answers ``GET`` with ``{"n": <count>}``,
    keeping connections (HTTP/1.1) or closing them after each answer (HTTP/1.0)."""

    def __init__(self, keep_alive: bool, idle_timeout_s: float | None = None) -> None:
        served = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"
            timeout = idle_timeout_s  # the server's own idle cut-off, if any
            disable_nagle_algorithm = True  # headers and body written apart: no 40 ms stall

            def do_GET(self) -> None:
                served.gets += 1
                body = f'{{"n": {served.gets}}}'.encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: object) -> None:
                pass

        self.gets = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/status"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    made: list[Server] = []
    yield made
    for server in made:
        server.close()


@pytest.fixture
def pool() -> Iterator[http_pool.Pool]:
    made = http_pool.Pool(per_host=2)
    yield made
    made.close()


def test_a_server_that_keeps_connections_is_asked_over_one(
    servers: list[Server], pool: http_pool.Pool
) -> None:
    servers.append(server := Server(keep_alive=True))

    answers = [pool.get(server.url, 1.0) for _ in range(5)]

    assert [a.body for a in answers] == [f'{{"n": {n}}}'.encode() for n in range(1, 6)]
    assert pool.opened == 1
    assert pool.kept() == 1


def test_a_server_that_closes_after_each_answer_costs_a_connection_each_and_keeps_none(
    servers: list[Server], pool: http_pool.Pool
) -> None:
    servers.append(server := Server(keep_alive=False))

    answers = [pool.get(server.url, 1.0) for _ in range(3)]

    assert [a.status for a in answers] == [200, 200, 200]
    assert pool.opened == 3
    assert pool.kept() == 0


def test_a_kept_connection_the_server_closed_is_replaced_within_the_same_get(
    servers: list[Server], pool: http_pool.Pool
) -> None:
    servers.append(server := Server(keep_alive=True, idle_timeout_s=0.2))
    pool.get(server.url, 1.0)
    time.sleep(0.5)  # the server closes the idle connection; the pool does not know yet

    answer = pool.get(server.url, 1.0)

    assert answer.status == 200
    assert pool.opened == 2


def test_a_server_that_does_not_answer_in_time_is_not_asked_twice(pool: http_pool.Pool) -> None:
    silent = socket.create_server(("127.0.0.1", 0))  # accepts (the backlog), never answers
    url = f"http://127.0.0.1:{silent.getsockname()[1]}/status"
    try:
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            pool.get(url, 0.3)
        took = time.monotonic() - started
    finally:
        silent.close()

    assert took < 0.6
    assert pool.opened == 1
    assert pool.kept() == 0


def test_a_refused_connection_and_a_url_that_is_not_http_are_errors(pool: http_pool.Pool) -> None:
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()

    with pytest.raises(ConnectionRefusedError):
        pool.get(f"http://127.0.0.1:{port}/status", 1.0)
    with pytest.raises(ValueError, match="not an http"):
        pool.get("ftp://example/status", 1.0)


def test_a_connection_left_idle_too_long_is_closed_not_used(servers: list[Server]) -> None:
    servers.append(server := Server(keep_alive=True))
    clock = Clock(100)
    pool = http_pool.Pool(idle_s=10, clock=clock)
    try:
        pool.get(server.url, 1.0)
        clock.now += 11
        pool.get(server.url, 1.0)  # the idle one is closed, a new one asked
        clock.now += 11
        pool.sweep()
        kept_after_the_sweep = pool.kept()
    finally:
        pool.close()

    assert pool.opened == 2
    assert kept_after_the_sweep == 0


def test_idle_connections_are_bounded_by_address_and_in_all(servers: list[Server]) -> None:
    servers.extend(Server(keep_alive=True) for _ in range(3))
    pool = http_pool.Pool(per_host=1, kept_max=2)
    try:
        for server in servers:
            pool.get(server.url, 1.0)
        kept = pool.kept()
        pool.get(servers[0].url, 1.0)  # the least recently used address lost its connection
    finally:
        pool.close()

    assert kept == 2
    assert pool.opened == 4
