"""Kept-alive connections between two requests: parked off the handler threads, and bounded.

Owns: the connections whose client keeps them open after an answer ("parked"), watched by one
thread with a selector, so an idle connection holds a socket and no handler thread; handing one
back (``ready``) when its client sends again, and closing one whose client hung up, one left
idle for ``idle_s``, and the oldest when one client address parks more than ``per_client`` or
everyone more than ``most``. A handler thread parks a connection (``park``); only the watching
thread touches it until it is handed back, so a connection has one owner at a time.

Does not own what becomes of a connection handed back (its deadline, its client's share, the
``503``: ``http_serving.py``) nor anything of HTTP: a parked connection is a socket, its
client's address and a way to close it.

Why: with HTTP/1.1 a client keeps its connection between requests (the operator's pool a few
seconds, Prometheus between scrapes); a handler thread waiting on it would be taken from every
other client for that long, the very starvation the fixed pool of threads is there to prevent.
The caps keep one pod from hoarding sockets; closing the oldest first keeps the newest, the
likeliest to be used again, and a client whose connection was closed simply opens another.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

log = logging.getLogger("kafleet.sidecar")

IDLE_S = 60.0  # twice a 30 s scrape interval; the operator's pool lets go after 10 s
PER_CLIENT = 4  # the operator's pool keeps two a sidecar, Prometheus one
MOST = 64


class Parkable(Protocol):
    """What parking needs of a connection."""

    @property
    def sock(self) -> socket.socket: ...

    @property
    def client(self) -> str: ...

    def close(self) -> None: ...


C = TypeVar("C", bound=Parkable)


class Parking(Generic[C]):
    """Idle kept-alive connections, watched by one thread of their own until their client sends."""

    def __init__(
        self,
        ready: Callable[[C], None],
        *,
        idle_s: float = IDLE_S,
        per_client: int = PER_CLIENT,
        most: int = MOST,
    ) -> None:
        if idle_s <= 0 or per_client < 1 or most < 1:
            raise ValueError(
                f"need idle_s > 0, per_client >= 1, most >= 1: got {idle_s}, {per_client}, {most}"
            )
        self.idle_s, self.per_client, self.most = idle_s, per_client, most
        self._ready = ready
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._lock = threading.Lock()  # guards the three below; the rest is the thread's own
        self._arriving: list[C] = []
        self._woken = False
        self._closing = False
        self._parked: collections.OrderedDict[C, float] = collections.OrderedDict()  # oldest first
        self._thread = threading.Thread(target=self._watch, name="kafleet-http-parked", daemon=True)
        self._thread.start()

    def park(self, connection: C) -> None:
        """Watch ``connection`` until its client sends again (called by a handler thread)."""
        with self._lock:
            closing, wake = self._closing, not self._woken
            if not closing:
                self._arriving.append(connection)
                self._woken = True
        if closing:
            connection.close()
        elif wake:
            self._wake()

    def __len__(self) -> int:
        """Connections parked now (a glance from another thread: the watcher's own count)."""
        return len(self._parked)

    def close(self) -> None:
        """Close every parked connection and stop watching."""
        with self._lock:
            self._closing = True
        self._wake()
        self._thread.join(5)

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # full: it is awake already
            self._wake_w.send(b"\0")

    def _watch(self) -> None:
        while True:
            timeout = None
            if self._parked:
                oldest = next(iter(self._parked.values()))
                timeout = max(0.0, oldest + self.idle_s - time.monotonic())
            for key, _ in self._selector.select(timeout):
                if key.fileobj is self._wake_r:
                    with contextlib.suppress(OSError):
                        self._wake_r.recv(4096)
                else:
                    self._readable(key.data)
            with self._lock:
                arriving, self._arriving, self._woken = self._arriving, [], False
                closing = self._closing
            if closing:
                break
            for connection in arriving:
                self._add(connection)
            now = time.monotonic()
            while self._parked and next(iter(self._parked.values())) + self.idle_s <= now:
                self._drop(next(iter(self._parked)))
        for connection in [*self._parked, *arriving]:
            connection.close()
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

    def _add(self, connection: C) -> None:
        same = [c for c in self._parked if c.client == connection.client]
        if len(same) >= self.per_client:
            log.debug("closed an idle connection of %s: it keeps %d", connection.client, len(same))
            self._drop(same[0])
        if len(self._parked) >= self.most:
            self._drop(next(iter(self._parked)))
        try:
            connection.sock.settimeout(0.0)
            self._selector.register(connection.sock, selectors.EVENT_READ, connection)
        except (OSError, ValueError):  # closed meanwhile (shut down at its deadline, say)
            connection.close()
            return
        self._parked[connection] = time.monotonic()

    def _drop(self, connection: C) -> None:
        self._selector.unregister(connection.sock)
        del self._parked[connection]
        connection.close()

    def _readable(self, connection: C) -> None:
        """The client sent again, or hung up: hand the connection back, or close it."""
        try:
            sent = connection.sock.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            return  # not readable after all: still parked
        except OSError:
            sent = b""  # reset by the client
        self._selector.unregister(connection.sock)
        del self._parked[connection]
        if not sent:
            connection.close()
            return
        try:
            self._ready(connection)
        except Exception:
            log.exception("a kept connection of %s could not be handed back", connection.client)
            connection.close()
