"""The sidecar's HTTP server: bounded, so a slow or silent client cannot take it over.

Owns: where it listens (by default ``::`` with ``IPV6_V6ONLY`` off, so one socket answers IPv6
and IPv4; ``0.0.0.0`` where the kernel has no IPv6; any other host in its own family), a fixed
pool of handler threads fed by a bounded queue of connections with a request to answer, a
deadline per request (from the connection's acceptance, or from when the client of a kept one
sends again: every read and write times out at it, and a connection still answering at it is
shut down, so a client trickling a byte at a time is cut off too), a bound per client address
(``per_client`` requests queued or answered at once; a share is freed just after its answer
has left, so a client asking again at once on another connection may find it still taken, on
its kept connection never), the answer when the pool, the queue or a client's share is full
(``503`` at once, then the connection is closed), and ``TCP_NODELAY`` on every accepted
socket. A connection gets one request a turn on a handler thread. When its
client keeps it (HTTP/1.1 without ``Connection: close``: the operator's pool, Prometheus), it
is parked off the threads until the client sends again, then queued as a new connection would
be (``keepalive.py`` watches the parked ones: idle timeout, caps); an HTTP/1.0 client,
``Connection: close`` (the kubelet's probes), a request with a body (perhaps left unread) or a
failed answer closes it. Does not own what is served (``sidecar/server.py``: its handler says
HTTP/1.1 and every answer's length, or no connection is kept).

Why: ``ThreadingHTTPServer`` starts a thread per connection and reads from a client for ever,
so a client that connects and sends nothing holds a thread for good, and a few hundred of them
exhaust the sidecar's memory limit. Here at most ``workers`` requests are answered at once, at
most ``queued`` wait, each for ``timeout_s`` at most; the threads are ``workers`` + the accept
loop + the parked connections' watcher, whatever the clients do. And one client cannot take
the pool from the others: a pod that opens twenty silent connections holds ``per_client`` of
them, so the kubelet's probes (from the node's address), Prometheus and the operator are still
answered. Kept connections: a new connection per GET cost the operator nearly twice the CPU of
a GET on a kept one (``http_pool.py``); but a kept connection idle on a thread would be a silent
client again, hence parking, and a parked one counts in no client's share: it holds no thread.
``TCP_NODELAY``: an answer leaves in one write when it fits its buffer (8 KiB), a larger one in
several, and on a kept connection the last small write would wait for the client's delayed ACK
(40 ms) without it.
"""

from __future__ import annotations

import contextlib
import errno
import io
import logging
import queue
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, cast

from kafleet.sidecar import keepalive

log = logging.getLogger("kafleet.sidecar")

DUAL_STACK = "::"
_BUSY_BODY = b"busy: every handler is taken, try again\n"
BUSY = (
    b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\nRetry-After: 1\r\n"
    + f"Content-Length: {len(_BUSY_BODY)}\r\n\r\n".encode()
    + _BUSY_BODY
)
NO_IPV6 = {errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL, errno.EPROTONOSUPPORT}


@dataclass(eq=False)
class Connection:
    """An accepted connection and, from its first turn on a handler thread, its handler."""

    sock: socket.socket
    address: Any
    handler: BaseHTTPRequestHandler | None = None

    @property
    def client(self) -> str:
        return str(self.address[0])

    def close(self) -> None:
        """Close it at once: an answer is flushed while its deadline holds, so what a failed
        one left in the buffer goes out only if it fits now."""
        with contextlib.suppress(OSError):
            self.sock.settimeout(0.0)
        if self.handler is not None:
            for file in (self.handler.wfile, self.handler.rfile):
                with contextlib.suppress(OSError):
                    file.close()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_WR)
        self.sock.close()


def _nothing(self: BaseHTTPRequestHandler) -> None:
    pass


def _one_request_a_turn(handler: type[BaseHTTPRequestHandler]) -> type[BaseHTTPRequestHandler]:
    """``handler`` made once a connection without reading or closing anything: the server asks
    it one request a turn (``handle_one_request``) and closes it; its answer buffered, so a
    small one leaves in one write."""
    attributes = {"handle": _nothing, "finish": _nothing, "wbufsize": io.DEFAULT_BUFFER_SIZE}
    return cast(type[BaseHTTPRequestHandler], type(handler.__name__, (handler,), attributes))


class BoundedHTTPServer(HTTPServer):
    """``HTTPServer`` with a fixed pool of handler threads and a deadline per request."""

    request_queue_size = 64  # the kernel's backlog: a burst is accepted, then queued or refused

    def __init__(
        self,
        host: str,
        port: int,
        handler: type[BaseHTTPRequestHandler],
        *,
        workers: int = 4,
        queued: int = 16,
        timeout_s: float = 5.0,
        per_client: int = 2,
        idle_s: float = keepalive.IDLE_S,
        parked_per_client: int = keepalive.PER_CLIENT,
        parked_max: int = keepalive.MOST,
    ) -> None:
        if workers < 1 or queued < 1 or timeout_s <= 0 or per_client < 1:
            raise ValueError(
                f"need workers >= 1, queued >= 1, timeout_s > 0, per_client >= 1: got "
                f"{workers}, {queued}, {timeout_s}, {per_client}"
            )
        self.per_client = per_client
        self._clients: dict[str, int] = {}  # requests queued or answered, per address
        self._clients_lock = threading.Lock()
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.dual_stack = host == DUAL_STACK
        self.timeout_s = timeout_s
        self.accepted = 0  # connections accepted, for the figures and the tests
        self._jobs: queue.Queue[tuple[Connection, float] | None] = queue.Queue(queued)
        self._open: dict[socket.socket, float] = {}  # connections answering: deadline
        self._open_lock = threading.Lock()
        self._handler = _one_request_a_turn(handler)
        super().__init__((host, port), self._handler)
        self._parking = keepalive.Parking[Connection](
            self._admit, idle_s=idle_s, per_client=parked_per_client, most=parked_max
        )
        self._workers = [
            threading.Thread(target=self._work, name=f"kafleet-http-{i}", daemon=True)
            for i in range(workers)
        ]
        for thread in self._workers:
            thread.start()

    def parked(self) -> int:
        """Kept-alive connections idle now, parked off the handler threads."""
        return len(self._parking)

    def server_bind(self) -> None:
        if self.dual_stack:
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()

    def get_request(self) -> tuple[socket.socket, Any]:
        request, address = super().get_request()
        with contextlib.suppress(OSError):
            request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.accepted += 1
        return request, address

    def process_request(self, request: Any, client_address: Any) -> None:
        """Called by the accept loop with a new connection."""
        self._admit(Connection(request, client_address))

    def _admit(self, connection: Connection) -> None:
        """Queue ``connection`` for a request's turn, its deadline from now, or refuse it when
        all is taken or its client already holds its share. Called by the accept loop, the
        parked connections' watcher and a handler thread (a request already read ahead)."""
        client = connection.client
        with self._clients_lock:
            held = self._clients.get(client, 0)
            if held < self.per_client:
                self._clients[client] = held + 1
        if held >= self.per_client:
            log.warning("refused a request from %s: it holds %d already", client, held)
            self._refuse(connection)
            return
        try:
            self._jobs.put_nowait((connection, time.monotonic() + self.timeout_s))
        except queue.Full:
            log.warning("refused a request from %s: every handler is taken", client)
            self._release(client)
            self._refuse(connection)

    def _release(self, client: str) -> None:
        with self._clients_lock:
            left = self._clients.get(client, 1) - 1
            if left > 0:
                self._clients[client] = left
            else:
                self._clients.pop(client, None)

    def _refuse(self, connection: Connection) -> None:
        with contextlib.suppress(OSError):
            connection.sock.setblocking(False)
            connection.sock.recv(65536)  # what the client sent already: closing on it would reset
        with contextlib.suppress(OSError):
            connection.sock.send(BUSY)
        connection.close()

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            connection, deadline = job
            try:
                kept = self._answer(connection, deadline)
            finally:
                self._release(connection.client)
            if kept:
                self._keep(connection)
            else:
                connection.close()

    def _answer(self, connection: Connection, deadline: float) -> bool:
        """Answer one request; whether the connection is kept for another."""
        left = deadline - time.monotonic()
        if left <= 0:  # waited its whole deadline in the queue
            return False
        with self._open_lock:
            self._open[connection.sock] = deadline
        try:
            handler = connection.handler
            if handler is None:
                handler = self._handler(connection.sock, connection.address, self)
                connection.handler = handler
            connection.sock.settimeout(left)
            handler.close_connection = True
            handler.handle_one_request()
            handler.wfile.flush()
            return (
                not handler.close_connection
                and handler.request_version >= "HTTP/1.1"  # a 1.0 client was not told it is kept
                and handler.headers.get("Content-Length", "0").strip() in ("", "0")
                and "Transfer-Encoding" not in handler.headers  # a body perhaps left unread
            )
        except Exception:  # a client gone mid-answer, a deadline: its own affair
            log.debug("connection from %s dropped", connection.address, exc_info=True)
            return False
        finally:
            with self._open_lock:
                del self._open[connection.sock]

    def _keep(self, connection: Connection) -> None:
        """Park a kept connection, or queue it again when its next request is read already."""
        assert connection.handler is not None
        rfile = connection.handler.rfile
        try:
            connection.sock.settimeout(0.0)
            ahead = isinstance(rfile, io.BufferedReader) and bool(rfile.peek(1))
        except OSError:
            connection.close()
            return
        if ahead:
            self._admit(connection)
        else:
            self._parking.park(connection)

    def service_actions(self) -> None:
        """Called by ``serve_forever`` every half second: cut off requests past deadline."""
        now = time.monotonic()
        with self._open_lock:  # held, so no worker closes a socket while it is shut down here
            for request, deadline in self._open.items():
                if deadline <= now:
                    with contextlib.suppress(OSError):
                        request.shutdown(socket.SHUT_RDWR)

    def server_close(self) -> None:
        super().server_close()
        self._parking.close()
        for _ in self._workers:
            try:
                self._jobs.put_nowait(None)
            except queue.Full:
                break


def listen(
    host: str, port: int, handler: type[BaseHTTPRequestHandler], **bounds: Any
) -> BoundedHTTPServer:
    """A bound server on ``host``; ``::`` falls back to ``0.0.0.0`` where IPv6 is absent."""
    try:
        return BoundedHTTPServer(host, port, handler, **bounds)
    except OSError as exc:
        if host != DUAL_STACK or exc.errno not in NO_IPV6:
            raise
        log.info("no IPv6 here (%s): listening on 0.0.0.0 only", exc)
        return BoundedHTTPServer("0.0.0.0", port, handler, **bounds)
