"""The real node's configuration files and command lines, rendered from its run folder.

Owns: where everything of one node lives inside its run folder (``NodeLayout``); containerd's
``config.toml`` (Debian's containerd 1.6), the CNI network (the ``rn0`` bridge, host-local IPAM),
the kubelet's and kube-proxy's configurations; and the fixed names a node on this machine uses
(node name, bridge, taint and label, cgroup root, the pause image), with the bind mounts that
keep containerd and the kubelet inside the run folder and the three sysctls the kubelet writes
away from the host (``REAL_NODES.md``, sections 6 to 8).

Writes only inside the run folder, and the empty mount points ``write_files`` reports.

Does not own: starting or stopping anything (``node.py``), the machine's bridge, cgroups and
packages (``node_host.py``), or images (``node_images.py``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tests.infra import pki
from tests.infra.kafka import POD_GATEWAY, POD_SUBNET
from tests.infra.ports import free_port

NODE_NAME = "realnode-0"
BRIDGE = "rn0"
CGROUP_ROOT = "realnode"
# Held (flock) by the node's namespace holder while the node lives, whichever checkout started it.
MACHINE_LOCK = Path("/run/kafleet-realnode.lock")
PAUSE_IMAGE = "localhost/pause:3.10"
REAL_NODE_LABEL = "kafleet.io/real-node"  # label key and taint key, both with the value "true"
KUBELET_PORT = 10250  # fixed: the apiserver reaches every kubelet on it
SERVICE_IP = pki.KUBERNETES_SERVICE_IP  # the `kubernetes` Service: its range's first address
# The sysctls the kubelet sets unless protectKernelDefaults, and the values it wants. Inside the
# node's mount namespace plain files with these values are bind-mounted over them.
KUBELET_SYSCTLS = {"vm/overcommit_memory": "1", "kernel/panic": "10", "kernel/panic_on_oops": "1"}


@dataclass(frozen=True)
class NodeLayout:
    """The paths of one node's run folder ``root`` (absolute; containerd does not expand)."""

    root: Path

    @property
    def socket(self) -> Path:
        return self.root / "containerd.sock"

    def log(self, component: str) -> Path:
        return self.root / "logs" / f"{component}.log"

    @property
    def containerd_config(self) -> Path:
        return self.root / "containerd" / "config.toml"

    @property
    def cni_conflist(self) -> Path:
        return self.root / "cni" / "net.d" / "10-realnode.conflist"

    @property
    def kubelet_dir(self) -> Path:
        return self.root / "kubelet"

    @property
    def kubelet_config(self) -> Path:
        return self.root / "kubelet-config.yaml"

    @property
    def kube_proxy_config(self) -> Path:
        return self.root / "kube-proxy-config.yaml"

    @property
    def holder_ready(self) -> Path:
        return self.root / "holder.ready"

    def fake_sysctl(self, name: str) -> Path:
        return self.root / "fakesys" / name.replace("/", ".")

    def bind_mounts(self) -> list[tuple[Path, Path]]:
        """(source in the run folder, target on the host) pairs that the node's private mount
        namespace binds: the fixed paths containerd 1.6 and the kubelet use whatever their
        configuration says (REAL_NODES.md, section 8), then the faked sysctls."""
        fixed = [
            (self.root / "containerd" / "run", Path("/run/containerd")),  # shims, fifos, runc
            (self.root / "cni" / "cache", Path("/var/lib/cni")),  # libcni's results cache
            (self.kubelet_dir, Path("/var/lib/kubelet")),  # device-plugins is hard-coded
            (self.root / "container-logs", Path("/var/log/containers")),  # legacy log symlinks
        ]
        sysctls = [(self.fake_sysctl(n), Path("/proc/sys") / n) for n in KUBELET_SYSCTLS]
        return fixed + sysctls


def containerd_config(layout: NodeLayout) -> str:
    """containerd 1.6's config: everything under the run folder, the CRI with the local pause
    image, ``restrict_oom_score_adj`` (no CAP_SYS_RESOURCE here), streaming on loopback."""
    r = layout.root
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    disabled = [
        f"io.containerd.snapshotter.v1.{name}" for name in ("aufs", "btrfs", "zfs", "devmapper")
    ] + ["io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
    return f"""\
version = 2
root = "{r}/containerd/root"
state = "{r}/containerd/state"
disabled_plugins = {json.dumps(disabled)}
[grpc]
  address = "{layout.socket}"
[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "{r}/containerd/opt"
  [{cri}]
    sandbox_image = "{PAUSE_IMAGE}"
    netns_mounts_under_state_dir = true
    enable_selinux = false
    disable_apparmor = true
    restrict_oom_score_adj = true
    stream_server_address = "127.0.0.1"
    [{cri}.cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "{layout.cni_conflist.parent}"
    [{cri}.containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [{cri}.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [{cri}.containerd.runtimes.runc.options]
          BinaryName = "/usr/sbin/runc"
          SystemdCgroup = false
"""


def cni_conflist(layout: NodeLayout) -> str:
    """The pod network: the ``rn0`` bridge as the pods' gateway, no masquerade, IPAM state in
    the run folder."""
    ipam = {
        "type": "host-local",
        "dataDir": str(layout.root / "cni" / "ipam"),
        "ranges": [[{"subnet": POD_SUBNET, "gateway": POD_GATEWAY}]],
        "routes": [{"dst": "0.0.0.0/0"}],
    }
    bridge = {
        "type": "bridge",
        "bridge": BRIDGE,
        "isGateway": True,
        "ipMasq": False,
        "hairpinMode": True,
        "ipam": ipam,
    }
    portmap = {"type": "portmap", "capabilities": {"portMappings": True}}
    return json.dumps(
        {"cniVersion": "1.0.0", "name": "realnode", "plugins": [bridge, portmap]}, indent=2
    )


def kubelet_config(layout: NodeLayout, node_ip: str, healthz_port: int) -> str:
    """The KubeletConfiguration of REAL_NODES.md, section 7, tainted so that only pods that
    tolerate ``kafleet.io/real-node`` land here. JSON, which is YAML too."""
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,  # Kubernetes 1.35+ refuses cgroup v1 without it
        "cgroupDriver": "cgroupfs",  # containerd 1.6 has no RuntimeConfig RPC to say so
        "cgroupRoot": f"/{CGROUP_ROOT}",
        "containerRuntimeEndpoint": f"unix://{layout.socket}",
        "address": node_ip,
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        # The apiserver sends no client certificate to kubelets: let it in.
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "podLogsDir": str(layout.root / "pod-logs"),
        "volumePluginDir": str(layout.root / "volume-plugins"),  # else /usr/libexec/kubernetes
        "failSwapOn": False,
        "syncFrequency": "10s",  # ConfigMap updates reach pods within ~10 s, not ~60-90 s
        # No disk pressure, ever: its thresholds are shares of the whole disk (1 % of a 250 GB
        # disk is 2.5 GB free), and under disk pressure the kubelet taints the node (no pod is
        # scheduled) and deletes every unused image, which cannot be pulled back here. "0%"
        # switches a threshold off (kubelet's eviction helpers); a full disk fails as ENOSPC,
        # and RealNode.start refuses to start with too little free space.
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "0%",
            "nodefs.inodesFree": "0%",
            "imagefs.available": "0%",
            "imagefs.inodesFree": "0%",
        },
        "imageGCHighThresholdPercent": 100,  # imported images cannot be pulled back
        "imageGCLowThresholdPercent": 99,
        "makeIPTablesUtilChains": False,  # else KUBE-FIREWALL rules on the host
        "maxPods": 50,
        "registerWithTaints": [{"key": REAL_NODE_LABEL, "value": "true", "effect": "NoSchedule"}],
    }
    return json.dumps(config, indent=2)


def kube_proxy_config(kubeconfig: Path, healthz_port: int, metrics_port: int) -> str:
    """kube-proxy in iptables mode that changes no sysctl (conntrack all zero, no localhost
    NodePorts) and serves its health and metrics on loopback only."""
    config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clusterCIDR": POD_SUBNET,
        "hostnameOverride": NODE_NAME,
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
        "iptables": {"localhostNodePorts": False},
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        "oomScoreAdj": 0,  # its default -999 needs CAP_SYS_RESOURCE, which this VM lacks
    }
    return json.dumps(config, indent=2)


def holder_command(layout: NodeLayout, python: str) -> list[str]:
    """The process that owns the node's private mount namespace: it binds the run folder's
    files and folders over the host's (``bind_mounts``), says so in a file, then sleeps until
    it is stopped. Its command line names the run folder, so it is found again by it. It holds
    ``MACHINE_LOCK`` for its life (the node's): one node per machine, and a node whose lock is
    held by another holder never undoes the machine-wide state that one set up."""
    script = (
        "import fcntl, json, signal, subprocess, sys\n"
        f"lock = open({str(MACHINE_LOCK)!r}, 'w')\n"
        "fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
        "for source, target in json.loads(sys.argv[2]):\n"
        "    subprocess.run(['mount', '--bind', source, target], check=True)\n"
        "open(sys.argv[1], 'w').close()\n"
        "while True:\n"
        "    signal.pause()\n"
    )
    mounts = json.dumps([[str(source), str(target)] for source, target in layout.bind_mounts()])
    namespace = ["unshare", "--mount", "--propagation", "private", "--"]
    return [*namespace, python, "-c", script, str(layout.holder_ready), mounts]


def kubelet_command(bin_dir: Path, layout: NodeLayout, kubeconfig: str, node_ip: str) -> list[str]:
    """The kubelet, with the control plane's admin kubeconfig (no TLS bootstrap), named
    ``realnode-0`` and labelled so that pods can select it."""
    return [
        str(bin_dir / "kubelet"),
        f"--config={layout.kubelet_config}",
        f"--kubeconfig={kubeconfig}",
        f"--root-dir={layout.kubelet_dir}",
        f"--cert-dir={layout.kubelet_dir / 'pki'}",
        f"--hostname-override={NODE_NAME}",
        f"--node-ip={node_ip}",
        f"--node-labels={REAL_NODE_LABEL}=true",
        "--v=2",
    ]


def kube_proxy_command(bin_dir: Path, layout: NodeLayout) -> list[str]:
    return [str(bin_dir / "kube-proxy"), f"--config={layout.kube_proxy_config}", "--v=1"]


def write_files(layout: NodeLayout, node_ip: str, kubeconfig: str) -> list[Path]:
    """Write every configuration file and make the folders the holder binds; return the mount
    points it had to make on the host (to be removed at stop)."""
    files = {
        layout.containerd_config: containerd_config(layout),
        layout.cni_conflist: cni_conflist(layout),
        layout.kubelet_config: kubelet_config(layout, node_ip, free_port()),
        layout.kube_proxy_config: kube_proxy_config(Path(kubeconfig), free_port(), free_port()),
    }
    files.update({layout.fake_sysctl(n): value + "\n" for n, value in KUBELET_SYSCTLS.items()})
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    made = []
    for source, target in layout.bind_mounts():
        if target.is_relative_to("/proc"):
            continue
        source.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            target.mkdir(parents=True)
            made.append(target)
    return made
