"""Installing Debian packages for the test bed: one ``apt-get`` at a time on this machine.

Owns: ``install``, ``apt-get update`` then ``apt-get install --no-install-recommends`` of the
packages asked for, as root, under a machine-wide file lock, so ``make -j`` (the set-up steps
side by side: the node's packages, Prometheus) never has two apt-gets race for dpkg's lock; an
apt-get of someone else's is waited for too (``DPkg::Lock::Timeout``). A failure raises a
``TestbedError`` with apt-get's own words and the command to run by hand.

Does not own which packages a part of the test bed needs, or checking them afterwards: its
callers (``node_host.py``, ``prometheus.py``) do.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from tests.infra.kafka import TestbedError

LOCK = Path("/run/lock/kafleet-apt.lock")
WAIT_S = 600  # for another apt-get (unattended upgrades, a person) to let go of dpkg's lock


def install(packages: Sequence[str], needed_for: str) -> None:
    """``apt-get install`` ``packages`` (``needed_for``: what needs them, for the message)."""
    by_hand = f"apt-get install --no-install-recommends {' '.join(packages)}"
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise TestbedError(
            f"{needed_for} needs Debian's {', '.join(packages)}, which cannot be installed here "
            f"(needs root and apt-get): {by_hand}"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    wait = ["-o", f"DPkg::Lock::Timeout={WAIT_S}"]
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    with LOCK.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        # An update that fails (its lists' lock, which DPkg::Lock::Timeout does not wait
        # for, held by apt's daily timer) leaves the lists as they were: install from those,
        # and say both if that fails too.
        update = _run(["apt-get", *wait, "update", "-qq"], env)
        cmd = ["apt-get", *wait, "install", "-y", "-qq", "--no-install-recommends", *packages]
        if (failed := _run(cmd, env)) is not None:
            raise TestbedError(
                f"{' '.join(cmd)} failed (for {needed_for}; by hand: {by_hand}):\n{failed}"
                + (f"\nand before it apt-get update:\n{update}" if update else "")
            )


def _run(cmd: list[str], env: dict[str, str]) -> str | None:
    """None, or what a failed command said."""
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    return None if done.returncode == 0 else f"{done.stdout[-2000:]}{done.stderr[-2000:]}"
