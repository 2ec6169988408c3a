"""Cutting one pod of the real node off from a TCP address (a broker), and letting it through again.

Owns: finding a running pod's network namespace (the pid of one of its running containers from
runc's state under the node's run folder, as ``tests/testbed/test_real_node.py`` reads it, then
``/proc/<pid>/ns/net``, held open by a file descriptor from then on, so that a container restarted
meanwhile does not take the way in with it), and two iptables DROP rules in that namespace only:
TCP to ``host:port`` and TCP from it. ``cut_off`` is a context manager whose exit always takes the
rules out again; ``Cut.restore`` takes them out earlier. Nothing on the host nor in another pod is
touched, and a pod that goes takes its rules with its namespace.

Does not own: the pods (``fleet.py``), the node (``tests/infra/node.py``) or what a test checks.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def runc_root(node_workdir: Path) -> Path:
    """Where the node's runc keeps its containers' state (bound over /run/containerd)."""
    return node_workdir / "containerd" / "run" / "runc" / "k8s.io"


def container_pid(root: Path, pod: dict[str, Any]) -> int:
    """The host pid of one running container of ``pod``, from runc's state under ``root``."""
    status = pod["status"]
    running = [
        s["containerID"].split("://", 1)[1]
        for s in [*status.get("initContainerStatuses", []), *status.get("containerStatuses", [])]
        if s.get("containerID") and "running" in s.get("state", {})
    ]
    seen = []
    for container in running:
        done = subprocess.run(
            ["runc", f"--root={root}", "state", container],
            capture_output=True,
            text=True,
            timeout=30,
        )
        seen.append(done.stdout.strip() or done.stderr.strip())
        if done.returncode == 0:
            state = json.loads(done.stdout)
            if state.get("status") == "running" and state.get("pid"):
                return int(state["pid"])
    raise AssertionError(
        f"no running container of pod {pod['metadata']['name']} in runc's state under {root} "
        f"(a cut needs the pod on this machine's real node): {running} -> {seen}"
    )


class Cut:
    """DROP rules for TCP to and from ``host:port`` in the network namespace open as ``netns``."""

    def __init__(self, netns: int, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.cut_at: float | None = None  # monotonic
        self.restored_at: float | None = None
        self._netns = netns
        self._rules = [
            ["OUTPUT", "-d", host, "-p", "tcp", "--dport", str(port), "-j", "DROP"],
            ["INPUT", "-s", host, "-p", "tcp", "--sport", str(port), "-j", "DROP"],
        ]

    def _iptables(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["nsenter", f"--net=/proc/self/fd/{self._netns}", "--", "iptables", "-w", "10", *args],
            capture_output=True,
            text=True,
            timeout=60,
            pass_fds=(self._netns,),
        )

    def listing(self) -> str:
        """The namespace's filter rules, as ``iptables -S`` prints them."""
        done = self._iptables("-S")
        return done.stdout if done.returncode == 0 else f"iptables -S failed: {done.stderr}"

    def apply(self) -> None:
        for rule in self._rules:
            done = self._iptables("-I", *rule)
            if done.returncode != 0:
                raise AssertionError(f"iptables -I {' '.join(rule)} failed: {done.stderr}")
        self.cut_at = time.monotonic()
        missing = [r for r in self._rules if self._iptables("-C", *r).returncode != 0]
        assert not missing, f"the cut's rules are not in place: {missing}; {self.listing()}"

    def restore(self) -> None:
        """Take the rules out (each as often as it is there); a no-op once done."""
        if self.restored_at is not None:
            return
        for rule in self._rules:
            while self._iptables("-C", *rule).returncode == 0:
                done = self._iptables("-D", *rule)
                if done.returncode != 0:
                    raise AssertionError(f"iptables -D {' '.join(rule)} failed: {done.stderr}")
        self.restored_at = time.monotonic()


@contextmanager
def cut_off(root: Path, pod: dict[str, Any], address: str) -> Iterator[Cut]:
    """``pod`` cannot reach ``address`` (``host:port``) over TCP, nor hear from it, until
    ``restore`` or the end of the block, whichever comes first."""
    for tool in ("nsenter", "iptables", "runc"):
        assert shutil.which(tool), f"a cut needs {tool} on the host (make node-packages)"
    host, _, port = address.rpartition(":")
    pid = container_pid(root, pod)
    netns = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    cut = Cut(netns, host, int(port))
    try:
        cut.apply()
        yield cut
    finally:
        try:
            cut.restore()
        finally:
            os.close(netns)
