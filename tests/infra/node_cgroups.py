"""The real node's cgroup root, ``/realnode``, in every hierarchy of the machine.

Owns: finding the cgroup hierarchies (v1, or v2 alone), making the root the kubelet's
``cgroupRoot`` points at (the kubelet puts ``kubepods`` below it, runc the containers), listing
and killing every process in it (the pods' containers), and removing it again, leaves first.

Does not own: anything else on the machine (``node_host.py``) or when this happens (``node.py``).
Only cgroup v1 (this project's CI machines) was tried; on a v2-only machine the root is made in
the unified hierarchy and the kubelet enables the controllers it needs below it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from pathlib import Path

from tests.infra.kafka import TestbedError

V1_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "pids", "devices", "freezer")
CGROUPS = Path("/sys/fs/cgroup")


def mounts() -> list[tuple[Path, str, set[str]]]:
    """(mount point, fstype, options) of every cgroup v1 and v2 hierarchy."""
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, point, fstype, options, *_ = line.split()
        if fstype in ("cgroup", "cgroup2"):
            found.append((Path(point), fstype, set(options.split(","))))
    return found


def missing_hierarchies() -> list[str]:
    """The v1 controllers the kubelet needs that are not mounted (none on a v2-only machine)."""
    found = mounts()
    if any(point == CGROUPS and fstype == "cgroup2" for point, fstype, _ in found):
        return []
    v1 = set().union(*(options for _, fstype, options in found if fstype == "cgroup"))
    return sorted(set(V1_CONTROLLERS) - v1)


def make_root(name: str) -> None:
    """``name`` in every cgroup v1 hierarchy (the cpuset one with its parent's CPUs and memory
    nodes, which a new cpuset lacks); on a cgroup v2 machine, in the unified hierarchy."""
    for point, fstype, options in mounts():
        if fstype == "cgroup2" and point != CGROUPS:
            continue  # the hybrid layout's unified tree: runc makes its own part
        (point / name).mkdir(exist_ok=True)
        if "cpuset" in options:
            for knob in ("cpuset.cpus", "cpuset.mems"):
                (point / name / knob).write_text((point / knob).read_text())


def pids(name: str) -> set[int]:
    """Every process in the ``name`` subtree of any hierarchy."""
    found: set[int] = set()
    for point, _, _ in mounts():
        for folder, _, _ in os.walk(point / name):
            try:
                text = (Path(folder) / "cgroup.procs").read_text()
            except OSError:
                continue
            found.update(int(pid) for pid in text.split())
    return found


def kill_all(name: str, timeout: float = 15.0) -> None:
    """SIGKILL every process in the ``name`` subtree (the pods' containers) until none is left."""
    deadline = time.monotonic() + timeout
    while found := pids(name):
        if time.monotonic() > deadline:
            raise TestbedError(f"processes {sorted(found)} in cgroup /{name} would not die")
        for pid in found:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def remove_root(name: str, timeout: float = 10.0) -> None:
    """rmdir the ``name`` subtree in every hierarchy, leaves first (the kubelet's ``kubepods``
    and runc's containers below it too)."""
    deadline = time.monotonic() + timeout
    for point, _, _ in mounts():
        for folder, _, _ in os.walk(point / name, topdown=False):
            while True:
                try:
                    os.rmdir(folder)
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:  # EBUSY while a killed process is still exiting
                    if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                        raise TestbedError(f"cannot remove cgroup {folder}: {exc}") from exc
                    time.sleep(0.05)


def roots(name: str) -> list[Path]:
    return [point / name for point, _, _ in mounts() if (point / name).exists()]
