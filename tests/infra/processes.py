"""Starting and stopping the test bed's server processes by their own pids.

Owns: spawning a server detached from the terminal with its output in a log file, waiting
until a spawned server answers (``wait_started``), checking whether a pid still runs, stopping
it (SIGTERM, then SIGKILL after a grace period), and cleaning up after test sessions that died
without stopping what they started. Only processes whose command line names the run folder are
ever signalled, so a recycled pid is never hit.

Does not own: what a server is or when it is ready (``kafka.py``, ``k8s.py``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie child of ours is reaped and counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        reaped, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return reaped == 0


def spawn(cmd: Sequence[str], log: Path, env: dict[str, str] | None = None) -> int:
    """Start ``cmd`` in a session of its own (Ctrl-C in a terminal reaches the tests, not the
    servers), with stdout and stderr appended to ``log``; return its pid."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            list(cmd),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )
    return proc.pid


def wait_started(pid: int, log: Path, ready: Callable[[], bool], timeout: float) -> str | None:
    """Poll ``ready`` (which may raise OSError while nothing listens) until it is true: None;
    else why not: the process exited (with the end of its log), or ``timeout`` passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return f"exited while starting:\n{log.read_text()[-3000:]}"
        try:
            if ready():
                return None
        except OSError:
            pass
        time.sleep(0.2)
    return f"was not ready within {timeout:.0f} s"


def stop(pid: int | None, timeout: float = 30.0) -> None:
    """SIGTERM, wait up to ``timeout`` seconds, then SIGKILL; wait until the pid is gone."""
    if pid is None or not alive(pid):
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if alive(pid):
        os.kill(pid, signal.SIGKILL)
        while alive(pid):
            time.sleep(0.02)


def kill(pid: int | None) -> None:
    """SIGKILL at once, and wait until the pid is gone."""
    if pid is not None and alive(pid):
        os.kill(pid, signal.SIGKILL)
        while alive(pid):
            time.sleep(0.02)


def _runs_under(pid: int, folder: Path) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return False
    return str(folder).encode() in cmdline


def reap_stale_runs(runs: Path) -> None:
    """Remove ``runs/session-<pid>`` folders whose test session no longer runs, first killing
    any process still running from such a folder (a session that was itself killed)."""
    if not runs.is_dir():
        return
    for folder in runs.glob("session-*"):
        owner = folder.name.removeprefix("session-")
        if owner.isdigit() and alive(int(owner)):
            continue
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit() and _runs_under(int(proc.name), folder):
                kill(int(proc.name))
        shutil.rmtree(folder, ignore_errors=True)
