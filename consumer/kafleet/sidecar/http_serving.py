"""The sidecar's HTTP server: bounded, so a slow or silent client cannot take it over.

Owns: where it listens (by default ``::`` with ``IPV6_V6ONLY`` off, so one socket answers IPv6
and IPv4; ``0.0.0.0`` where the kernel has no IPv6; any other host in its own family), a fixed
pool of handler threads fed by a bounded queue of accepted connections, a deadline per
connection (every read and write times out at it, and a connection still open at it is shut
down, so a client trickling a byte at a time is cut off too), a bound per client address
(``per_client`` connections queued or handled at once), and the answer when the pool, the
queue or a client's share is full: ``503`` at once, then the connection is closed. Does not
own what is served (``sidecar/server.py``).

Why: ``ThreadingHTTPServer`` starts a thread per connection and reads from a client for ever,
so a client that connects and sends nothing holds a thread for good, and a few hundred of them
exhaust the sidecar's memory limit. Here at most ``workers`` requests are handled at once, at
most ``queued`` wait, each for ``timeout_s`` at most; the threads are ``workers`` + the accept
loop, whatever the clients do. Each connection carries one request (HTTP/1.0), so the deadline
of a connection is the deadline of its request. And one client cannot take the pool from the
others: a pod that opens twenty idle connections holds ``per_client`` of them, so the
kubelet's probes (from the node's address), Prometheus and the operator are still answered.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import queue
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

log = logging.getLogger("kafleet.sidecar")

DUAL_STACK = "::"
_BUSY_BODY = b"busy: every handler is taken, try again\n"
BUSY = (
    b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\nRetry-After: 1\r\n"
    + f"Content-Length: {len(_BUSY_BODY)}\r\n\r\n".encode()
    + _BUSY_BODY
)
NO_IPV6 = {errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL, errno.EPROTONOSUPPORT}

Job = tuple[socket.socket, Any, float]


class BoundedHTTPServer(HTTPServer):
    """``HTTPServer`` with a fixed pool of handler threads and a deadline per connection."""

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
    ) -> None:
        if workers < 1 or queued < 1 or timeout_s <= 0 or per_client < 1:
            raise ValueError(
                f"need workers >= 1, queued >= 1, timeout_s > 0, per_client >= 1: got "
                f"{workers}, {queued}, {timeout_s}, {per_client}"
            )
        self.per_client = per_client
        self._clients: dict[str, int] = {}  # connections queued or handled, per address
        self._clients_lock = threading.Lock()
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.dual_stack = host == DUAL_STACK
        self.timeout_s = timeout_s
        self._jobs: queue.Queue[Job | None] = queue.Queue(queued)
        self._open: dict[socket.socket, float] = {}  # connections being handled: deadline
        self._open_lock = threading.Lock()
        super().__init__((host, port), handler)
        self._workers = [
            threading.Thread(target=self._work, name=f"kafleet-http-{i}", daemon=True)
            for i in range(workers)
        ]
        for thread in self._workers:
            thread.start()

    def server_bind(self) -> None:
        if self.dual_stack:
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()

    def process_request(self, request: Any, client_address: Any) -> None:
        """Called by the accept loop: queue the connection, or refuse it when all is taken or
        its client already holds its share."""
        client = str(client_address[0])
        with self._clients_lock:
            held = self._clients.get(client, 0)
            if held < self.per_client:
                self._clients[client] = held + 1
        if held >= self.per_client:
            log.warning("refused a connection from %s: it holds %d already", client, held)
            self._refuse(request)
            return
        try:
            self._jobs.put_nowait((request, client_address, time.monotonic() + self.timeout_s))
        except queue.Full:
            log.warning("refused a connection from %s: every handler is taken", client_address)
            self._release(client_address)
            self._refuse(request)

    def _release(self, client_address: Any) -> None:
        client = str(client_address[0])
        with self._clients_lock:
            left = self._clients.get(client, 1) - 1
            if left > 0:
                self._clients[client] = left
            else:
                self._clients.pop(client, None)

    def _refuse(self, request: socket.socket) -> None:
        with contextlib.suppress(OSError):
            request.setblocking(False)
            request.recv(65536)  # what the client sent already: closing on it would reset
        with contextlib.suppress(OSError):
            request.send(BUSY)
        self.shutdown_request(request)

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            request, address, deadline = job
            left = deadline - time.monotonic()
            if left <= 0:  # waited its whole deadline in the queue
                self._release(address)
                self.shutdown_request(request)
                continue
            request.settimeout(left)
            with self._open_lock:
                self._open[request] = deadline
            try:
                self.finish_request(request, address)
            except Exception:  # a client gone mid-answer, a deadline: its own affair
                log.debug("connection from %s dropped", address, exc_info=True)
            finally:
                with self._open_lock:
                    del self._open[request]
                self._release(address)
                self.shutdown_request(request)

    def service_actions(self) -> None:
        """Called by ``serve_forever`` every half second: cut off connections past deadline."""
        now = time.monotonic()
        with self._open_lock:  # held, so no worker closes a socket while it is shut down here
            for request, deadline in self._open.items():
                if deadline <= now:
                    with contextlib.suppress(OSError):
                        request.shutdown(socket.SHUT_RDWR)

    def server_close(self) -> None:
        super().server_close()
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
