"""What the real node needs from, and changes on, the machine itself.

Owns: checking the prerequisites (root, cgroups, overlayfs, Debian's containerd, runc, CNI
plugins, buildah and iptables, the kubelet's port) with messages that name what is missing;
installing the packages (``install_packages``, what ``make node-tools`` runs); the ``rn0``
bridge; reading and restoring a sysctl; the host's primary IP; stopping the processes whose
command line names a run folder; and kube-proxy's iptables rules. Every change made here is
undone by a function here.

Does not own: when any of this happens (``node.py``), configuration text (``node_runtime.py``),
or the node's cgroups (``node_cgroups.py``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from tests.infra import apt, node_cgroups, processes
from tests.infra.kafka import POD_GATEWAY, TestbedError
from tests.infra.node_runtime import BRIDGE, CGROUP_ROOT, KUBELET_PORT, MACHINE_LOCK

# Debian package -> a file it installs that the node uses.
PACKAGES = {
    "containerd": "/usr/bin/containerd",
    "runc": "/usr/sbin/runc",
    "containernetworking-plugins": "/usr/lib/cni/bridge",
    "buildah": "/usr/bin/buildah",
    "mmdebstrap": "/usr/bin/mmdebstrap",
    "iptables": "/usr/sbin/iptables",
}
# The files the node runs, beyond the packages' markers above.
REQUIRED_FILES = (
    "/usr/bin/containerd-shim-runc-v2",
    "/usr/bin/ctr",
    *(f"/usr/lib/cni/{plugin}" for plugin in ("bridge", "host-local", "portmap", "loopback")),
)


def missing_packages() -> list[str]:
    return [package for package, marker in PACKAGES.items() if not Path(marker).exists()]


def install_packages() -> None:
    """``apt-get install`` the node's Debian packages when any is missing (needs root)."""
    missing = missing_packages()
    if not missing:
        return
    apt.install(list(PACKAGES), "the real node")
    still = missing_packages()
    if still:
        raise TestbedError(f"apt-get installed {', '.join(PACKAGES)}, yet {still} are missing")


def check_prerequisites() -> None:
    """Raise a TestbedError naming everything the node would miss on this machine."""
    problems = []
    if os.geteuid() != 0:
        problems.append("root (uid 0): containerd, runc and the kubelet need it")
    missing_hierarchies = node_cgroups.missing_hierarchies()
    if missing_hierarchies:
        problems.append(f"cgroup hierarchies mounted under /sys/fs/cgroup: {missing_hierarchies}")
    if "overlay" not in Path("/proc/filesystems").read_text():
        problems.append("overlayfs (containerd's snapshotter): modprobe overlay")
    if missing_packages():
        problems.append(f"Debian's {', '.join(missing_packages())} (make node-tools installs them)")
    problems += [f"{path} (from the packages above)" for path in REQUIRED_FILES
                 if not Path(path).exists()]  # fmt: skip
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the kubelet binds
        try:
            sock.bind(("0.0.0.0", KUBELET_PORT))
        except OSError:
            problems.append(f"port {KUBELET_PORT} free (the kubelet's; is another node running?)")
    if problems:
        raise TestbedError("the real node needs " + "; ".join(problems))


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise TestbedError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")
    return done


def machine_free() -> bool:
    """No real node runs on this machine: nobody holds ``MACHINE_LOCK`` (its holder does)."""
    with open(MACHINE_LOCK, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(lock, fcntl.LOCK_UN)
        return True


def bridge_exists() -> bool:
    return Path("/sys/class/net", BRIDGE).exists()


def ensure_bridge() -> bool:
    """Create ``rn0`` with the pods' gateway address unless it exists; True if made here."""
    if bridge_exists():
        return False
    _ip("link", "add", BRIDGE, "type", "bridge")
    _ip("addr", "add", f"{POD_GATEWAY}/24", "dev", BRIDGE)
    _ip("link", "set", BRIDGE, "up")
    return True


def delete_bridge(timeout_s: float = 30.0) -> None:
    """Delete ``rn0`` and wait until it is gone: the kernel frees a deleted device only once its
    last references go (a pod's veth, whose namespace dies with its last process), and until
    then the device is still listed (CI once found it there right after the node stopped)."""
    if bridge_exists():
        _ip("link", "del", BRIDGE)
    deadline = time.monotonic() + timeout_s
    while bridge_exists():
        if time.monotonic() > deadline:
            raise TestbedError(f"the {BRIDGE} bridge is still there {timeout_s:g} s after deletion")
        time.sleep(0.2)


def read_sysctl(name: str) -> str:
    return (Path("/proc/sys") / name).read_text().strip()


def write_sysctl(name: str, value: str) -> None:
    (Path("/proc/sys") / name).write_text(value + "\n")


def exited(pid: int) -> bool:
    """Whether ``pid`` is gone or a zombie: the node's processes outlive the command that
    started them, and PID 1 on these VMs reaps orphans only every two seconds or so."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def stop_process(pid: int, timeout: float = 15.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout`` seconds; return once it has exited (and reap
    it if it is a child of ours)."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
        if exited(pid):
            break
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while not exited(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
    processes.alive(pid)  # reaps our own child


def names_folder(pid: int, folder: Path) -> bool:
    """Whether ``pid``'s command line names a path inside ``folder`` (so it is ours)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return False
    return f"{folder}/".encode() in cmdline


def processes_naming(folder: Path) -> list[int]:
    """Every process but this one whose command line names ``folder`` (shims included)."""
    return [
        int(proc.name)
        for proc in Path("/proc").iterdir()
        if proc.name.isdigit() and int(proc.name) != os.getpid()
        and names_folder(int(proc.name), folder)
    ]  # fmt: skip


def containerd_answers(socket_path: Path) -> bool:
    done = subprocess.run(
        ["ctr", f"--address={socket_path}", "version"], capture_output=True, check=False, timeout=10
    )
    return done.returncode == 0


def kube_proxy_cleanup(kube_proxy: Path, log: Path) -> None:
    """``kube-proxy --cleanup`` removes its iptables (and ipvs, nftables) rules, all but one
    chain (``remove_kube_firewall``)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        done = subprocess.run(
            [str(kube_proxy), "--cleanup"], stdout=out, stderr=subprocess.STDOUT, check=False
        )
    if done.returncode != 0:
        raise TestbedError(f"kube-proxy --cleanup failed (exit {done.returncode}); see {log}")
    remove_kube_firewall()


def remove_kube_firewall() -> None:
    """Remove the KUBE-FIREWALL chains and their jumps from INPUT and OUTPUT, IPv4 and IPv6:
    kube-proxy makes them (copies of the kubelet's) and ``--cleanup`` leaves them behind."""
    for binary in ("iptables", "ip6tables"):
        iptables = [binary, "-w", "5", "-t", "filter"]
        for chain in ("INPUT", "OUTPUT"):
            while (
                subprocess.run(
                    [*iptables, "-D", chain, "-j", "KUBE-FIREWALL"],
                    capture_output=True,
                    check=False,
                ).returncode
                == 0
            ):
                pass
        for flag in ("-F", "-X"):
            subprocess.run([*iptables, flag, "KUBE-FIREWALL"], capture_output=True, check=False)
        done = subprocess.run([*iptables, "-S"], capture_output=True, text=True, check=False)
        if "KUBE-FIREWALL" in done.stdout:
            raise TestbedError(f"{binary} still has kube-proxy's KUBE-FIREWALL:\n{done.stdout}")


def service_routed(ip: str) -> bool:
    """Whether kube-proxy's iptables rules send the Service ``ip`` anywhere yet."""
    done = subprocess.run(
        ["iptables", "-w", "5", "-t", "nat", "-S", "KUBE-SERVICES"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.returncode == 0 and f"-d {ip}/32" in done.stdout


def leftover_rules() -> list[str]:
    """kube-proxy's and CNI's chains and rules still in the host's iptables, IPv4 and IPv6
    (none after a clean stop)."""
    lines = []
    for save in ("iptables-save", "ip6tables-save"):
        done = subprocess.run([save], capture_output=True, text=True, check=False)
        lines += [f"{save}: {line}" for line in done.stdout.splitlines()
                  if "KUBE-" in line or "CNI-" in line]  # fmt: skip
    return lines


def leftovers(
    workdir: Path, made_dirs: list[str], sysctls: dict[str, str], bridge_before: bool = False
) -> list[str]:
    """What a stopped node left on the machine (empty when nothing): a bridge (unless one was
    there before it: ``bridge_before``, a run killed earlier left it, and the node used it
    as it found it), cgroups, processes, iptables rules, folders it made, or sysctls that
    differ from ``sysctls``."""
    found = [f"the {BRIDGE} bridge"] if bridge_exists() and not bridge_before else []
    found += [f"cgroup {path}" for path in node_cgroups.roots(CGROUP_ROOT)]
    found += [f"process {pid}" for pid in processes_naming(workdir)]
    found += [f"iptables rule {rule}" for rule in leftover_rules()]
    found += [f"folder {folder}" for folder in made_dirs if Path(folder).exists()]
    found += [
        f"sysctl {name} = {read_sysctl(name)} (was {value})"
        for name, value in sysctls.items()
        if read_sysctl(name) != value
    ]
    return found
