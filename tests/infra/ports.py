"""Loopback ports for the test bed's listeners: free now, and still ours when a process restarts.

Owns: choosing a TCP port for a listener the test bed starts (a broker, a controller, an
apiserver, a worker's metrics endpoint) and reserving it for the life of the process that chose
it.

Why not ``bind(("127.0.0.1", 0))``: the kernel answers with a port from its ephemeral range
(``net.ipv4.ip_local_port_range``, 32768-60999 here), the same range it takes the local port of
every outgoing connection from. A broker stopped for a rolling restart leaves its ports unbound
for seconds, and with three test sessions and their clients connecting all the time, an outgoing
connection took a stopped controller's port once in CI; the broker then failed to start with
"Address already in use". So ports come from below the ephemeral range, where the kernel never
puts an outgoing connection, at random, and each one is checked free by binding it.

Two test sessions run side by side, and each may stop a listener and start it again on the same
port, so a port must stay reserved while it is unbound too. Each chosen port is locked
(``flock``) in a shared folder for as long as the process that chose it lives; the kernel drops
the lock when the process exits, however it exits, so nothing is ever left to clean up.

Does not own: what listens on the port, or when it starts.
"""

from __future__ import annotations

import fcntl
import os
import random
import socket
import tempfile
from pathlib import Path

LOOPBACK = "127.0.0.1"
LOWEST = 15000
"""The lowest port handed out; below it live well-known and registered services."""
LOCKS = Path(tempfile.gettempdir()) / "kafleet-test-ports"
"""Shared by every checkout on the machine, since they share its ports."""

_held: dict[int, int] = {}
"""Port -> the file descriptor holding its lock, kept open for the process's life."""


def ephemeral_floor() -> int:
    """The lowest port the kernel may give an outgoing connection (32768 when unreadable)."""
    try:
        low = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0]
        return int(low)
    except (OSError, IndexError, ValueError):
        return 32768


def free_port() -> int:
    """A TCP port below the ephemeral range that nothing listens on and no other process holds."""
    LOCKS.mkdir(mode=0o777, exist_ok=True)
    highest = ephemeral_floor() - 1
    for _ in range(1000):
        port = random.randint(LOWEST, highest)
        if port in _held or not _reserve(port):
            continue
        if _bindable(port):
            return port
        _release(port)
    raise OSError(f"no free loopback port between {LOWEST} and {highest} after 1000 tries")


def _reserve(port: int) -> bool:
    """Take the port's lock, or say another live process holds it."""
    fd = os.open(LOCKS / str(port), os.O_CREAT | os.O_RDWR, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    _held[port] = fd
    return True


def _release(port: int) -> None:
    os.close(_held.pop(port))


def _bindable(port: int) -> bool:
    """Whether a listener could bind the port on the loopback address right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
    return True
