"""A real, local Kubernetes control plane for the operator's tests, without Docker.

Owns: starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok from the
binaries that ``k8s_build.py`` builds; the TLS material (a CA, the apiserver's serving cert, the
service-account signing key, the front proxy's CA and client pair, made with ``openssl``); an
admin identity (a bearer token in the apiserver's token file, group ``system:masters``); the
kubeconfig; two fake nodes that kwok keeps Ready (renewing a Lease per node in
``kube-node-lease``, as a kubelet does, so the node controller never marks them Unknown and their
pods unready) and whose scheduled pods it turns Running. Everything lives in one run folder under
``.cache/k8s/``, and every process is stopped by its own pid.

Does not own: the binaries (``k8s_build.py``) or anything a test puts in the cluster.

The apiserver's flags follow controller-runtime's envtest (RBAC on), but with a 10.0.0.0/16
Service range (a Service per ConsumerGroup, for a thousand groups and more) and the
ServiceAccount admission plugin on, as a real cluster does: pods on the real node (``node.py``)
get a token and talk to the apiserver with their in-cluster configuration, at the node's bridge
gateway, where it listens too. It has the front proxy's flags (requestheader, the proxy's client
certificate), so aggregated APIs work (KEDA's external metrics adapter: ``keda.py``). Unlike
envtest it also runs the controller manager (Deployments get ReplicaSets and Pods, garbage
collection follows owner references), the scheduler (pods are bound to nodes), and kwok (nodes
and pods come alive).

    python -m tests.infra.k8s up      # start (or reuse) the development control plane
    python -m tests.infra.k8s down    # stop it
    python -m tests.infra.k8s status  # print its kubeconfig path, exit 1 if it is not running
    python -m tests.infra.k8s nodes 8 # 8 more fake nodes of 1,250 pods each (kwok_nodes.py)
"""

from __future__ import annotations

import argparse
import json
import secrets
import shutil
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tests.infra import k8s_build, kwok_nodes, pki, processes
from tests.infra.kafka import LOOPBACK, POD_GATEWAY, TestbedError
from tests.infra.ports import free_port

RUNS = k8s_build.CACHE / "runs"
DEV_WORKDIR = k8s_build.CACHE / "dev"
FAKE_NODES = ("kwok-node-0", "kwok-node-1")
FAKE_NODE_IP = "10.249.0.2"  # their InternalIP (kwok's --node-ip)
FAKE_NODE_PODS = 110  # each of the two, a kubelet's default; more nodes: ``nodes`` below
# The node controller marks a node NotReady when neither its status nor its Lease was renewed
# for this long (kube-controller-manager's --node-monitor-grace-period, 50 s by default):
# shorter here, so that a test bed losing its heartbeats shows it within a test.
NODE_MONITOR_GRACE_S = 20
NODE_LEASE_S = 12  # kwok renews each node's Lease every quarter of this, as a kubelet does
START_TIMEOUT_S = 120.0
# The order in which the processes start; they stop in the reverse order.
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


@dataclass
class ControlPlane:
    """One local control plane; its state (ports, pids, token) is saved in ``workdir``."""

    workdir: Path
    ports: dict[str, int] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)
    token: str = ""

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def server(self) -> str:
        return f"https://{LOOPBACK}:{self.ports['apiserver']}"

    def log_path(self, component: str) -> Path:
        return self.workdir / "logs" / f"{component}.log"

    def running(self) -> bool:
        return bool(self.pids) and all(processes.alive(pid) for pid in self.pids.values())

    # -- start ------------------------------------------------------------------------------

    def start(self, timeout: float = START_TIMEOUT_S) -> None:
        bin_dir = k8s_build.build()
        stages = k8s_build.kwok_stages()
        self.workdir.mkdir(parents=True, exist_ok=True)
        certs = self.workdir / "pki"
        if not (certs / "front-proxy" / "client.crt").exists():  # the last file pki.make makes
            pki.make(certs)
        for name in ("etcd", "etcd-peer", "apiserver", "controller-manager", "scheduler", "kwok"):
            self.ports.setdefault(name, free_port())
        self.token = self.token or secrets.token_hex(24)
        (self.workdir / "tokens.csv").write_text(
            f'{self.token},kafleet-admin,kafleet-admin,"system:masters"\n'
        )
        self._write_kubeconfig(certs / "ca.crt")
        deadline = time.monotonic() + timeout
        try:
            self._spawn("etcd", self._etcd_cmd(bin_dir))
            self._wait_http(f"http://{LOOPBACK}:{self.ports['etcd']}/health", "etcd", deadline)
            self._spawn("kube-apiserver", self._apiserver_cmd(bin_dir, certs))
            self._wait_http(f"{self.server}/readyz", "kube-apiserver", deadline)
            self._spawn("kube-controller-manager", self._controller_manager_cmd(bin_dir, certs))
            self._spawn("kube-scheduler", self._scheduler_cmd(bin_dir))
            self._spawn("kwok", self._kwok_cmd(bin_dir, stages))
            self._create_fake_nodes()
            self._wait_nodes_ready(deadline)
        except BaseException:
            self.stop()
            raise

    def _spawn(self, component: str, cmd: list[str]) -> None:
        self.pids[component] = processes.spawn(cmd, self.log_path(component))
        self._save()

    def _etcd_cmd(self, bin_dir: Path) -> list[str]:
        client = f"http://{LOOPBACK}:{self.ports['etcd']}"
        peer = f"http://{LOOPBACK}:{self.ports['etcd-peer']}"
        return [
            str(bin_dir / "etcd"),
            "--name=testbed",
            f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=testbed={peer}",
            "--unsafe-no-fsync=true",  # a throwaway test store: speed over durability
            "--log-level=warn",
        ]

    def _apiserver_cmd(self, bin_dir: Path, certs: Path) -> list[str]:
        return [
            str(bin_dir / "kube-apiserver"),
            f"--etcd-servers=http://{LOOPBACK}:{self.ports['etcd']}",
            # Every address, so that pods on the real node reach it at the bridge's gateway, which
            # is also what the `kubernetes` Service's endpoint says (kube-proxy routes to it).
            "--bind-address=0.0.0.0",
            f"--advertise-address={POD_GATEWAY}",
            f"--secure-port={self.ports['apiserver']}",
            # The real node's name does not resolve: reach its kubelet (logs, exec) by its IP.
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            f"--tls-cert-file={certs / 'apiserver.crt'}",
            f"--tls-private-key-file={certs / 'apiserver.key'}",
            f"--client-ca-file={certs / 'ca.crt'}",
            f"--token-auth-file={self.workdir / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            # OpenShift's default: setting blockOwnerDeletion needs `update` on the owner's
            # finalizers, so the chart's RBAC test meets what such clusters ask.
            "--enable-admission-plugins=OwnerReferencesPermissionEnforcement",
            f"--service-cluster-ip-range={pki.SERVICE_RANGE}",
            "--allow-privileged=true",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={certs / 'sa.pub'}",
            f"--service-account-signing-key-file={certs / 'sa.key'}",
            "--enable-priority-and-fairness=false",  # one client at a time; no need to queue
            # The front proxy: how the apiserver authenticates to aggregated API servers
            # (KEDA's metrics adapter), which trust the user and groups of these headers.
            f"--requestheader-client-ca-file={certs / 'front-proxy' / 'ca.crt'}",
            f"--requestheader-allowed-names={pki.FRONT_PROXY_CLIENT}",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={certs / 'front-proxy' / 'client.crt'}",
            f"--proxy-client-key-file={certs / 'front-proxy' / 'client.key'}",
            "--v=1",
        ]

    def _controller_manager_cmd(self, bin_dir: Path, certs: Path) -> list[str]:
        kc = str(self.kubeconfig)
        return [
            str(bin_dir / "kube-controller-manager"),
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--leader-elect=false",
            f"--bind-address={LOOPBACK}",
            f"--secure-port={self.ports['controller-manager']}",
            f"--service-account-private-key-file={certs / 'sa.key'}",
            f"--root-ca-file={certs / 'ca.crt'}",
            f"--cluster-signing-cert-file={certs / 'ca.crt'}",
            f"--cluster-signing-key-file={certs / 'ca.key'}",
            "--use-service-account-credentials=false",
            "--concurrent-deployment-syncs=10",
            "--concurrent-replicaset-syncs=10",
            f"--node-monitor-grace-period={NODE_MONITOR_GRACE_S}s",
            "--v=1",
        ]

    def _scheduler_cmd(self, bin_dir: Path) -> list[str]:
        kc = str(self.kubeconfig)
        return [
            str(bin_dir / "kube-scheduler"),
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--leader-elect=false",
            f"--bind-address={LOOPBACK}",
            f"--secure-port={self.ports['scheduler']}",
            "--v=1",
        ]

    def _kwok_cmd(self, bin_dir: Path, stages: list[Path]) -> list[str]:
        return [
            str(bin_dir / "kwok"),
            f"--kubeconfig={self.kubeconfig}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            "--cidr=10.250.0.0/16",  # fake pod IPs, apart from the real node's 10.244.0.0/24
            # The fake nodes' InternalIP: outside the Service range and both pod ranges, so no
            # Service's ClusterIP or pod's address is ever also a node's.
            f"--node-ip={FAKE_NODE_IP}",
            f"--server-address={LOOPBACK}:{self.ports['kwok']}",
            # kwok holds and renews a Lease per node only with this (its default is 0: none);
            # without one the node controller marks the nodes Unknown every grace period.
            f"--node-lease-duration-seconds={NODE_LEASE_S}",
            *(f"--config={stage}" for stage in stages),
        ]

    def _write_kubeconfig(self, ca: Path) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "testbed",
                    "cluster": {"server": self.server, "certificate-authority": str(ca)},
                }
            ],
            "users": [{"name": "kafleet-admin", "user": {"token": self.token}}],
            "contexts": [
                {"name": "testbed", "context": {"cluster": "testbed", "user": "kafleet-admin"}}
            ],
            "current-context": "testbed",
        }
        self.kubeconfig.write_text(json.dumps(config, indent=2))  # JSON is YAML too
        self.kubeconfig.chmod(0o600)

    def _wait_http(self, url: str, component: str, deadline: float) -> None:
        context = ssl.create_default_context(cafile=str(self.workdir / "pki" / "ca.crt"))
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {self.token}"})
        last = ""
        while time.monotonic() < deadline:
            if not processes.alive(self.pids[component]):
                raise TestbedError(f"{component} exited while starting; {self._tail(component)}")
            try:
                with urllib.request.urlopen(request, timeout=2, context=context) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError) as exc:
                last = str(exc)
            time.sleep(0.2)
        raise TestbedError(f"{component} was not ready in time ({last}); {self._tail(component)}")

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> str:
        """Run the test bed's kubectl against this control plane; return its stdout."""
        return kubectl(self.kubeconfig, *args, input=input, check=check, timeout=timeout)

    def _create_fake_nodes(self) -> None:
        nodes = [
            kwok_nodes.node(name, pods=FAKE_NODE_PODS, cpu="32", memory="256Gi")
            for name in FAKE_NODES
        ]
        self.kubectl(
            "apply",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes}),
        )

    def _wait_nodes_ready(self, deadline: float) -> None:
        remaining = max(1, int(deadline - time.monotonic()))
        try:
            self.kubectl(
                "wait",
                "--for=condition=Ready",
                f"--timeout={remaining}s",
                *(f"node/{n}" for n in FAKE_NODES),
            )
        except TestbedError as exc:
            raise TestbedError(
                f"the fake nodes did not become Ready: {exc}; {self._tail('kwok')}"
            ) from exc

    # -- stop -------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop every process this control plane started, newest first, by its own pid."""
        for component in reversed(COMPONENTS):
            processes.stop(self.pids.pop(component, None), timeout=15)
        self._save()

    def _tail(self, component: str, lines: int = 25) -> str:
        log = self.log_path(component)
        text = log.read_text(errors="replace").splitlines()[-lines:] if log.exists() else []
        return f"its log ({log}) ends:\n" + "\n".join(text)

    def _save(self) -> None:
        state = {"ports": self.ports, "pids": self.pids, "token": self.token}
        (self.workdir / "state.json").write_text(json.dumps(state))

    @classmethod
    def load(cls, workdir: Path) -> ControlPlane | None:
        try:
            state = json.loads((workdir / "state.json").read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        return cls(workdir, state["ports"], state["pids"], state["token"])


def kubectl(
    kubeconfig: Path | str,
    *args: str,
    input: str | None = None,
    check: bool = True,
    timeout: float = 120,
) -> str:
    """Run the test bed's kubectl with ``kubeconfig``; its stdout. A failure (when ``check``)
    is a ``TestbedError`` with kubectl's own message."""
    return _run_tool("kubectl", kubeconfig, args, input, check, timeout)


def helm(kubeconfig: Path | str, *args: str, timeout: float = 300) -> str:
    """Run the test bed's helm with ``kubeconfig``; its stdout, or a ``TestbedError`` with
    helm's own message."""
    return _run_tool("helm", kubeconfig, args, None, True, timeout)


def _run_tool(
    tool: str,
    kubeconfig: Path | str,
    args: tuple[str, ...],
    input: str | None,
    check: bool,
    timeout: float,
) -> str:
    done = subprocess.run(
        [str(k8s_build.BIN / tool), f"--kubeconfig={kubeconfig}", *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and done.returncode != 0:
        raise TestbedError(f"{tool} {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def start_control_plane(workdir: Path) -> ControlPlane:
    """A fresh control plane in ``workdir`` (emptied first), started, nodes Ready."""
    shutil.rmtree(workdir, ignore_errors=True)
    plane = ControlPlane(workdir)
    plane.start()
    return plane


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    command = (args or ["status"])[0]
    if command not in ("up", "down", "status", "nodes"):
        print(
            f"usage: python -m tests.infra.k8s up|down|status|nodes (not {command!r})",
            file=sys.stderr,
        )
        return 2
    try:
        if command == "nodes":
            return _nodes(args[1:])
        plane = ControlPlane.load(DEV_WORKDIR)
        running = plane is not None and plane.running()
        if command == "status" or (command == "up" and running):
            if running and plane is not None:
                _warn_unmanaged(plane.kubeconfig)
                print(plane.kubeconfig)
                return 0
            print("the development control plane is not running (make k8s-up)", file=sys.stderr)
            return 1
        if command == "down":
            if plane is not None:
                plane.stop()
                print("stopped the development control plane", file=sys.stderr)
            return 0
        started = time.monotonic()
        if plane is not None:
            plane.stop()
        plane = start_control_plane(DEV_WORKDIR)
        print(
            f"Kubernetes {k8s_build.K8S_VERSION} is up at {plane.server} "
            f"({time.monotonic() - started:.1f} s); KUBECONFIG={plane.kubeconfig}",
            file=sys.stderr,
        )
        print(plane.kubeconfig)
        return 0
    except TestbedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _nodes(argv: list[str]) -> int:
    """``nodes N [--pods P] [--set NAME] [--kubeconfig PATH]``: keep N extra fake nodes that
    kwok runs (``kwok_nodes.keep``), on the development control plane unless a kubeconfig is
    given; print their names, and warn of nodes nothing runs."""
    parser = argparse.ArgumentParser(prog="python -m tests.infra.k8s nodes")
    parser.add_argument("count", type=int, help="extra fake nodes wanted (0 removes them)")
    parser.add_argument("--pods", type=int, default=kwok_nodes.DEFAULT_PODS, help="per node")
    parser.add_argument("--set", default=kwok_nodes.DEFAULT_SET, help="the nodes' name prefix")
    parser.add_argument("--kubeconfig", type=Path, help="default: the development plane's")
    options = parser.parse_args(argv)
    kubeconfig = options.kubeconfig
    if kubeconfig is None:
        plane = ControlPlane.load(DEV_WORKDIR)
        if plane is None or not plane.running():
            print("the development control plane is not running (make k8s-up)", file=sys.stderr)
            return 1
        kubeconfig = plane.kubeconfig
    started = time.monotonic()
    names = kwok_nodes.keep(_kubectl_for(kubeconfig), options.count, options.set, options.pods)
    print(
        f"{len(names)} fake nodes of {options.pods} pods Ready ({options.count * options.pods} "
        f"pods; {time.monotonic() - started:.1f} s), label type=kwok",
        file=sys.stderr,
    )
    _warn_unmanaged(kubeconfig)
    print("\n".join(names))
    return 0


def _kubectl_for(kubeconfig: Path) -> kwok_nodes.Kubectl:
    def run(*args: str, input: str | None = None, check: bool = True) -> str:
        return kubectl(kubeconfig, *args, input=input, check=check, timeout=180)

    return run


def _warn_unmanaged(kubeconfig: Path) -> None:
    """Name on stderr each node that nothing runs (``kwok_nodes.unmanaged``); best effort: a
    plane that does not answer at once is not checked."""
    try:
        names = kwok_nodes.find_unmanaged(_kubectl_for(kubeconfig))
    except (TestbedError, subprocess.TimeoutExpired, ValueError):
        return
    for name in names:
        print(
            f"warning: node {name} has no annotation {kwok_nodes.ANNOTATION}="
            f"{kwok_nodes.ANNOTATION_VALUE} and no kubelet: kwok leaves it alone, and pods "
            "bound to it stay Pending (add fake nodes with `make k8s-nodes`)",
            file=sys.stderr,
        )


if __name__ == "__main__":
    sys.exit(main())
