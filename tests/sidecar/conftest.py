"""The sidecar's fixtures: ``sidecar(state_file, *flags)`` starts a real ``kafleet sidecar``."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.infra.ports import free_port
from tests.infra.waiting import wait_until


def get(url: str, timeout: float = 5) -> tuple[int, str]:
    """(status, body) of a GET; an error status is returned, not raised."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _answers(url: str) -> bool:
    try:
        get(url + "/healthz")
    except OSError:
        return False
    return True


class Sidecars:
    """Real ``kafleet sidecar`` processes, stopped after the test."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.started: dict[str, subprocess.Popen[bytes]] = {}

    def __call__(self, state_file: Path, *flags: str, host: str | None = "127.0.0.1") -> str:
        """Start one on a free port (``host=None``: its default address); its base URL."""
        port = free_port()
        log = open(self.tmp_path / f"sidecar-{port}.log", "wb")  # noqa: SIM115
        where = ["--host", host] if host is not None else []
        proc = subprocess.Popen(
            [sys.executable, "-m", "kafleet", "sidecar", "--state-file", str(state_file),
             *where, "--port", str(port), *flags],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        self.started[url] = proc
        wait_until(lambda: _answers(url) or proc.poll() is not None, 30, "the sidecar to answer")
        if proc.poll() is not None:
            log_text = (self.tmp_path / f"sidecar-{port}.log").read_text()[-2000:]
            raise AssertionError(f"the sidecar exited with {proc.returncode}:\n{log_text}")
        return url

    def pid(self, url: str) -> int:
        return self.started[url].pid

    def stop_all(self) -> None:
        for proc in self.started.values():
            proc.terminate()
            proc.wait(10)


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[Sidecars]:
    """``sidecar(state_file, *flags, host="127.0.0.1")``: a real ``kafleet sidecar``; returns
    its base URL (``sidecar.pid(url)`` is its process)."""
    sidecars = Sidecars(tmp_path)
    yield sidecars
    sidecars.stop_all()


def trickle(sock: socket.socket, pieces: list[bytes], every_s: float = 0.4) -> bool:
    """Send ``pieces`` one at a time, ``every_s`` apart (each inside a server's per-read
    timeout, the whole past its deadline); True if the server closed the connection first."""
    for piece in pieces:
        try:
            sock.sendall(piece)
        except OSError:
            return True
        time.sleep(every_s)
    return False
