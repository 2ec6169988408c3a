"""A real Kubernetes node for the test bed: containerd, runc, the CNI bridge, kubelet, kube-proxy.

Owns: starting and stopping one real node, ``realnode-0``, attached to a control plane from
``k8s.py`` (REAL_NODES.md is the recipe): a private mount namespace whose holder bind-mounts
plain files over the three sysctls the kubelet writes (so the host's stay as they are) and the
run folder over the fixed paths containerd and the kubelet use; the ``rn0`` bridge; containerd
and the kubelet inside that namespace; kube-proxy, so the ``kubernetes`` Service routes to the
apiserver (pods run the operator with their in-cluster configuration). The node is tainted and
labelled ``kafleet.io/real-node=true``: only pods that tolerate and select it land here, never
tests written for kwok's fake nodes. State (pids, what was changed) is saved in the run folder
under ``.cache/node/``, so that a later start tears down a node whose session died.

Does not own: configuration text (``node_runtime.py``), the machine's bridge, sysctls and
packages (``node_host.py``), cgroups (``node_cgroups.py``), images (``node_images.py``), or the
control plane.

One node per machine: port 10250, ``rn0`` and 10.244.0.0/24 are fixed.

    python -m tests.infra.node up      # start (or reuse) a node on the development control plane
    python -m tests.infra.node down    # stop it
    python -m tests.infra.node status  # exit 1 if it is not running
    python -m tests.infra.node packages  # install the Debian packages the node needs (root)
    python -m tests.infra.node tools   # the packages, then build kubelet and the pause image
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tests.infra import (
    images,
    k8s,
    k8s_build,
    node_cgroups,
    node_host,
    node_images,
    node_runtime,
    processes,
)
from tests.infra.kafka import POD_GATEWAY, TestbedError
from tests.infra.node_runtime import CGROUP_ROOT, MACHINE_LOCK, NODE_NAME, NodeLayout

CACHE = node_images.CACHE
DEV_WORKDIR = CACHE / "dev"
START_TIMEOUT_S = 120.0
IP_FORWARD = "net/ipv4/ip_forward"  # the CNI bridge sets it; the only machine-wide setting
# What a session's node takes on disk: containerd's copy of the images (about 3 GB unpacked),
# the pods' logs and writable layers, with room to spare.
MIN_FREE_GB = 4.0


@dataclass
class RealNode:
    """One node, whose state is saved in ``workdir/state.json``. ``owner`` is the pid of the
    test session that started it (None for the development node)."""

    workdir: Path
    kubeconfig: str = ""  # the control plane's admin kubeconfig
    server: str = ""  # and its apiserver, to tell a restarted control plane
    owner: int | None = None
    pids: dict[str, int] = field(default_factory=dict)
    made_bridge: bool = False
    made_dirs: list[str] = field(default_factory=list)
    ip_forward: str | None = None  # its value before the node started
    proxy_started: bool = False
    ready_s: float = 0.0

    @property
    def layout(self) -> NodeLayout:
        return NodeLayout(self.workdir)

    def running(self) -> bool:
        pid = self.pids.get("kubelet")
        return pid is not None and node_host.names_folder(pid, self.workdir)

    def kubectl(self, *args: str, check: bool = True) -> str:
        cache = f"--cache-dir={self.workdir / 'kubectl-cache'}"
        return k8s.kubectl(
            self.kubeconfig, cache, "--request-timeout=10s", *args, check=check, timeout=60
        )

    def load_images(self, tarballs: Mapping[str, Path], unpack: bool = True) -> list[str]:
        """Import ``{image ref: docker-archive tarball}`` into the node's containerd, skipping
        those imported already; return the refs imported now (see node_images.load_images)."""
        record = self.workdir / "containerd" / "imported.json"
        return node_images.load_images(self.layout.socket, tarballs, record, unpack)

    def has_image(self, ref: str) -> bool:
        return ref in node_images.image_refs(self.layout.socket)

    # -- start ------------------------------------------------------------------------------

    def start(self, timeout: float = START_TIMEOUT_S) -> None:
        node_host.check_prerequisites()
        if not node_host.machine_free():
            raise TestbedError(
                f"another real node runs on this machine (its holder has {MACHINE_LOCK}), "
                "maybe from another checkout: there can be one per machine; stop it first"
            )
        self.workdir.mkdir(parents=True, exist_ok=True)
        free_gb = shutil.disk_usage(self.workdir).free / 1e9
        if free_gb < MIN_FREE_GB:
            raise TestbedError(
                f"the real node needs {MIN_FREE_GB:.0f} GB free for its images and pods, and "
                f"{self.workdir}'s disk has {free_gb:.1f} GB: free some space (old clones and "
                "their .cache, `go clean -cache`) and run again"
            )
        bin_dir = k8s_build.build()
        pause = node_images.pause_image()
        # The kubelet serves (anonymous, AlwaysAllow: the test bed's apiserver sends no client
        # certificate) only on the pods' bridge, which only this machine reaches, never on the
        # host's own address.
        layout, ip = self.layout, POD_GATEWAY
        self.ip_forward = node_host.read_sysctl(IP_FORWARD)
        self._save()
        started = time.monotonic()
        deadline = started + timeout
        try:
            self.made_dirs = [str(d) for d in node_runtime.write_files(layout, ip, self.kubeconfig)]
            self._spawn("holder", node_runtime.holder_command(layout, sys.executable))
            self._wait(lambda: layout.holder_ready.exists(), "holder", "its mounts", deadline)
            self.made_bridge = node_host.ensure_bridge()
            node_cgroups.make_root(CGROUP_ROOT)
            self._save()
            self._spawn(
                "containerd",
                self._in_namespace("containerd", f"--config={layout.containerd_config}"),
            )
            self._wait(
                lambda: node_host.containerd_answers(layout.socket),
                "containerd",
                "its socket",
                deadline,
            )
            self._check_private("containerd")
            self.load_images({node_runtime.PAUSE_IMAGE: pause})  # before any sandbox
            kubelet = node_runtime.kubelet_command(bin_dir, layout, self.kubeconfig, ip)
            self._spawn("kubelet", self._in_namespace(*kubelet))
            self.proxy_started = True
            self._spawn("kube-proxy", node_runtime.kube_proxy_command(bin_dir, layout))
            self._wait(self._node_ready, "kubelet", f"node {NODE_NAME} to be Ready", deadline)
            self._check_private("kubelet")  # long in it by now (nsenter's setns comes first)
            self.ready_s = time.monotonic() - started
            self._wait(
                lambda: node_host.service_routed(node_runtime.SERVICE_IP),
                "kube-proxy",
                "the `kubernetes` Service's iptables rules",
                deadline,
            )
        except BaseException:
            self.stop()
            raise
        self._save()
        print(
            f"real node {NODE_NAME} Ready in {self.ready_s:.1f} s (namespace to Ready), "
            f"Services routed after {time.monotonic() - started:.1f} s",
            file=sys.stderr,
        )

    def _in_namespace(self, *cmd: str) -> list[str]:
        return ["nsenter", "-t", str(self.pids["holder"]), "-m", "--", *cmd]

    def _check_private(self, component: str) -> None:
        """``component`` runs in the holder's mount namespace, where the run folder is bound
        over the host's fixed paths; else its shims and CNI results would land on the host."""
        holder, pid = self.pids["holder"], self.pids[component]
        try:
            ours, theirs = (os.readlink(f"/proc/{p}/ns/mnt") for p in (holder, pid))
            info = Path(f"/proc/{holder}/mountinfo").read_text()
            mounted = {line.split()[4] for line in info.splitlines()}
        except OSError as exc:
            raise TestbedError(f"{component} or the holder exited while starting: {exc}") from None
        missing = [str(t) for _, t in self.layout.bind_mounts() if str(t) not in mounted]
        if theirs != ours or ours == os.readlink("/proc/self/ns/mnt") or missing:
            raise TestbedError(
                f"{component} is not in the node's private mount namespace ({theirs}; the "
                f"holder's {ours}; not bound there: {missing or 'none'}): its files would land "
                f"on the host; {self.tail('holder')}"
            )

    def _spawn(self, component: str, cmd: list[str]) -> None:
        self.pids[component] = processes.spawn(cmd, self.layout.log(component))
        self._save()

    def _wait(
        self, condition: Callable[[], object], component: str, what: str, deadline: float
    ) -> None:
        while not condition():
            if not processes.alive(self.pids[component]):
                raise TestbedError(f"{component} exited while starting; {self.tail(component)}")
            if time.monotonic() > deadline:
                raise TestbedError(f"timed out waiting for {what}; {self.tail(component)}")
            time.sleep(0.1)

    def _node_ready(self) -> bool:
        out = self.kubectl("get", "node", NODE_NAME, "-o", "json", "--ignore-not-found")
        conditions = json.loads(out)["status"].get("conditions", []) if out.strip() else []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def standing(self) -> str:
        """Why pods may not land or start here: the node's taints other than its own, its
        conditions that are not as they should be, and the free disk; "as it should be" else."""
        out = self.kubectl(
            "get", "node", NODE_NAME, "-o", "json", "--ignore-not-found", check=False
        )
        if not out.strip().startswith("{"):
            return f"node {NODE_NAME} is not registered: {out.strip()[:500]}"
        node = json.loads(out)
        wrong = [
            f"taint {t['key']}={t.get('value', '')}:{t['effect']}"
            for t in node["spec"].get("taints", [])
            if t["key"] != node_runtime.REAL_NODE_LABEL
        ]
        wrong += [
            f"{c['type']}={c['status']} ({c.get('reason', '')}: {c.get('message', '')})"
            for c in node["status"].get("conditions", [])
            if (c["status"] == "True") != (c["type"] == "Ready")
        ]
        free_gb = shutil.disk_usage(self.workdir).free / 1e9
        wrong += [f"{free_gb:.1f} GB free on disk"] if free_gb < MIN_FREE_GB else []
        return f"node {NODE_NAME}: " + ("; ".join(wrong) if wrong else "as it should be")

    def tail(self, component: str, lines: int = 25) -> str:
        log = self.layout.log(component)
        text = log.read_text(errors="replace").splitlines()[-lines:] if log.exists() else []
        return f"its log ({log}) ends:\n" + "\n".join(text)

    # -- stop -------------------------------------------------------------------------------

    def stop(self) -> None:
        """Undo everything ``start`` did, whatever state it reached; each step by pid, and a
        no-op when done already. The pods' processes die with the node (SIGKILL). A step that
        fails does not stop the others; the error names every failed step."""
        errors: list[str] = []

        def step(action: Callable[[], object]) -> None:
            try:
                action()
            except (TestbedError, OSError, subprocess.SubprocessError) as exc:
                errors.append(str(exc))

        registered = "kubelet" in self.pids and Path(self.kubeconfig).exists()
        # The machine-wide state (cgroups, bridge, sysctl, iptables) is this node's to undo only
        # if its holder still has the machine's lock, or nobody has: never another node's.
        holder = self.pids.get("holder")
        mine = (
            holder is not None and node_host.names_folder(holder, self.workdir)
        ) or node_host.machine_free()
        step(lambda: self._stop("kubelet"))
        step(lambda: self._stop("kube-proxy"))
        if registered:  # the Node object goes, and with it (by the pod GC) its pods
            step(lambda: self.kubectl("delete", "node", NODE_NAME, "--wait=false", check=False))
        if mine:
            step(lambda: node_cgroups.kill_all(CGROUP_ROOT))
        step(lambda: self._stop("containerd"))
        step(lambda: self._kill_rest(but=self.pids.get("holder")))  # containerd's shims
        step(lambda: self._stop("holder"))  # its mounts vanish with the namespace
        step(lambda: self._kill_rest(but=None))
        if mine:
            step(lambda: node_cgroups.remove_root(CGROUP_ROOT))
        if self.made_bridge and mine:
            step(node_host.delete_bridge)
        if self.ip_forward is not None and mine:
            step(lambda: node_host.write_sysctl(IP_FORWARD, str(self.ip_forward)))
        if self.proxy_started and mine:
            step(
                lambda: node_host.kube_proxy_cleanup(
                    k8s_build.BIN / "kube-proxy", self.layout.log("kube-proxy-cleanup")
                )
            )
        for folder in reversed(self.made_dirs):  # the mount points made on the host
            step(functools.partial(_rmdir, Path(folder)))
        if not errors:
            self.made_bridge, self.ip_forward, self.proxy_started = False, None, False
            self.made_dirs = []
        self._save()
        if errors:
            raise TestbedError(f"stopping the real node in {self.workdir}: " + "; ".join(errors))

    def _kill_rest(self, but: int | None) -> None:
        for pid in node_host.processes_naming(self.workdir):
            if pid != but:
                node_host.stop_process(pid, timeout=0)

    def _stop(self, component: str) -> None:
        pid = self.pids.pop(component, None)
        if pid is not None and node_host.names_folder(pid, self.workdir):
            node_host.stop_process(pid)
        self._save()

    def _save(self) -> None:
        state = asdict(self)
        state["workdir"] = str(self.workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "state.json").write_text(json.dumps(state, indent=2))

    @classmethod
    def load(cls, workdir: Path) -> RealNode | None:
        try:
            state = json.loads((workdir / "state.json").read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        state["workdir"] = workdir
        return cls(**state)


def _rmdir(folder: Path) -> None:
    if folder.exists():
        folder.rmdir()


def reap_stale_nodes() -> None:
    """Tear down every node under ``.cache/node`` whose test session is gone (or whose
    processes died); refuse when another node still runs, since there is one per machine."""
    for state in sorted(CACHE.glob("*/state.json")):
        node = RealNode.load(state.parent)
        if node is None:
            continue
        if node.running() and (node.owner is None or processes.alive(node.owner)):
            who = "the development" if node.owner is None else f"test session {node.owner}'s"
            raise TestbedError(
                f"{who} real node runs from {node.workdir}; there can be one per machine "
                "(port 10250, bridge rn0): stop it first (make node-down for the development one)"
            )
        node.stop()
        if state.parent.name.startswith("session-"):
            shutil.rmtree(state.parent, ignore_errors=True)


def session_workdir() -> Path:
    return CACHE / f"session-{os.getpid()}"


def start_node(
    plane: k8s.ControlPlane,
    workdir: Path,
    images: Mapping[str, Path] | None = None,
    development: bool = False,
) -> RealNode:
    """A fresh node in ``workdir`` (emptied first) on ``plane``, Ready, Services routed, with
    ``images`` imported. It belongs to this process (a test session), so a later session
    tears it down if this one dies without stopping it; unless it is the ``development`` node."""
    reap_stale_nodes()
    shutil.rmtree(workdir, ignore_errors=True)
    owner = None if development else os.getpid()
    node = RealNode(workdir, str(plane.kubeconfig), plane.server, owner)
    node.start()
    try:
        node.load_images(images or {})
    except BaseException:
        node.stop()
        raise
    return node


def main(argv: list[str] | None = None) -> int:
    command = (argv or sys.argv[1:] or ["status"])[0]
    if command not in ("up", "down", "status", "packages", "tools", "images"):
        print(
            "usage: python -m tests.infra.node up|down|status|packages|tools|images "
            f"(not {command!r})",
            file=sys.stderr,
        )
        return 2
    try:
        if command == "packages":
            node_host.install_packages()
            return 0
        if command == "tools":
            node_host.install_packages()
            k8s_build.build()
            print(node_images.pause_image())
            return 0
        node = RealNode.load(DEV_WORKDIR)
        if command == "down":
            if node is not None:
                node.stop()
                print("stopped the development node", file=sys.stderr)
            return 0
        plane = k8s.ControlPlane.load(k8s.DEV_WORKDIR)
        on_plane = plane is not None and plane.running()
        server = plane.server if plane is not None and on_plane else None
        current = node is not None and node.running() and node.server == server
        if command == "images":  # the project's images, built (or reused) and imported
            if node is None or not current:
                print("the development node is not running (make node-up)", file=sys.stderr)
                return 1
            for ref in node.load_images(images.build_all()):
                print(f"imported {ref}", file=sys.stderr)
            refs = node_images.image_refs(node.layout.socket)
            print("\n".join(sorted(ref for ref in refs if not ref.startswith("sha256:"))))
            return 0
        if command == "status" or (command == "up" and current):
            if current:
                print(NODE_NAME)
                return 0
            print("the development node is not running (make node-up)", file=sys.stderr)
            return 1
        if plane is None or server is None:
            print("the development control plane is not running (make k8s-up)", file=sys.stderr)
            return 2
        if node is not None:
            node.stop()
        start_node(plane, DEV_WORKDIR, development=True)
        print(NODE_NAME)
        return 0
    except TestbedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
