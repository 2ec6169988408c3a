"""The test bed's listener ports: outside the kernel's ephemeral range, and never handed out twice
while the process that chose one lives, even while nothing is bound to it."""

from __future__ import annotations

import socket
import subprocess
import sys

from tests.conftest import REPO
from tests.infra import ports


def test_a_port_is_chosen_below_the_range_outgoing_connections_take_their_ports_from() -> None:
    floor = ports.ephemeral_floor()
    chosen = [ports.free_port() for _ in range(50)]
    assert all(ports.LOWEST <= port < floor for port in chosen)
    assert len(set(chosen)) == len(chosen)


def test_a_port_left_unbound_by_a_restart_is_not_taken_by_the_outgoing_connections_meanwhile() -> (
    None
):
    port = ports.free_port()
    with socket.create_server((ports.LOOPBACK, 0), backlog=256) as server:
        target = server.getsockname()
        clients = [socket.create_connection(target) for _ in range(200)]
        try:
            assert port not in {client.getsockname()[1] for client in clients}
            with socket.create_server((ports.LOOPBACK, port)):
                pass  # the listener starts again on its own port
        finally:
            for client in clients:
                client.close()


def test_a_port_another_live_process_chose_is_not_handed_out_here() -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from tests.infra import ports; print(ports.free_port(), flush=True);"
            " sys.stdin.read()",
        ],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        held = int(holder.stdout.readline())
        assert not ports._reserve(held)  # locked, though nothing listens on it
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    assert ports._reserve(held)  # the lock went with the process
    ports._release(held)
