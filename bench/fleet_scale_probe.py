"""B9's readers of what a process, the broker and the apiserver spend, and its fake sidecars.

Owns: a process's figures from ``/proc``, its descendants' included (kafleet's operator may
read Kafka in a child process): CPU seconds, resident and peak memory, threads, open fds,
established TCP connections to a port; and a ``Sampler`` that takes them every second over a
window; the broker's request counters over JMX (the agent started in the running broker
with ``jcmd ManagementAgent.start``, read with Kafka's own ``org.apache.kafka.tools.JmxTool``,
so ``tests/infra/kafka.py`` is left as it is); the apiserver's ``apiserver_request_total`` from
its ``/metrics``; and ``FakeSidecars``, one HTTP server answering every pod's ``/status`` with
``{}``, so that kafleet's calls to sidecars cost a real request, not the 2 s timeout of an
address kwok made up.

Does not own what is measured when (``b9_fleet_scale.py``) or any workload.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.infra import k8s
from tests.infra import kafka as kafka_infra

TICKS = os.sysconf("SC_CLK_TCK")
ESTABLISHED = "01"
LISTEN = "0A"
# The broker's own requests (KRaft in the same JVM), not any client's.
INTERNAL_REQUESTS = frozenset(
    {"BrokerHeartbeat", "BrokerRegistration", "ControllerRegistration", "Vote",
     "BeginQuorumEpoch", "EndQuorumEpoch", "DescribeQuorum", "UpdateRaftVoter"}
)  # fmt: skip
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE", "APPLY"})
# The control plane's own heartbeats (kwok's nodes and their Leases), whatever runs.
BACKGROUND = frozenset({"leases", "nodes"})


@dataclass(frozen=True)
class ProcSample:
    """A process and its descendants (a reader process of its own counts with its parent)."""

    t: float
    processes: int
    cpu_s: float  # user and system, the reaped descendants' included
    rss_mib: float
    peak_rss_mib: float  # the sum of each process's own peak
    threads: int
    fds: int
    connections: int  # established, to the port asked for


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


def _socket_inodes(pid: int) -> set[str]:
    """The inodes of the process's sockets (none if it is gone or not ours to read)."""
    found: set[str] = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return found
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            found.add(target[8:-1])
    return found


def _tcp_rows(pid: int) -> list[list[str]]:
    rows: list[list[str]] = []
    for table in ("tcp", "tcp6"):
        lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        rows.extend(line.split() for line in lines)
    return rows


def connections(pids: list[int], port: int) -> int:
    """The processes' established TCP connections to ``port`` (any address)."""
    inodes = set().union(*map(_socket_inodes, pids))
    return sum(
        1
        for row in _tcp_rows(pids[0])
        if row[3] == ESTABLISHED and int(row[2].rsplit(":", 1)[1], 16) == port and row[9] in inodes
    )


def tree(pid: int) -> list[int]:
    """``pid`` and its living descendants."""
    children: dict[int, list[int]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            parent = int(Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()[1])
        except OSError:  # gone meanwhile
            continue
        children.setdefault(parent, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo.extend(children.get(found[-1], []))
    return found


def listening_pid(port: int) -> int | None:
    """The pid of the process that listens on TCP ``port``, or None."""
    inodes = {
        row[9]
        for row in _tcp_rows(os.getpid())
        if row[3] == LISTEN and int(row[1].rsplit(":", 1)[1], 16) == port
    }
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if inodes & _socket_inodes(int(pid)):
            return int(pid)
    return None


def sample(pid: int, port: int) -> ProcSample:
    """``pid`` and its descendants now."""
    pids, cpu, rss, peak, threads, fds = tree(pid), 0, 0, 0, 0, 0
    for one in pids:
        try:
            stat = Path(f"/proc/{one}/stat").read_text().rpartition(")")[2].split()
            status = _status(one)
            opened = len(os.listdir(f"/proc/{one}/fd"))
        except OSError:  # a descendant gone meanwhile (its parent's cutime has it)
            if one == pid:
                raise
            continue
        cpu += sum(map(int, stat[11:15]))  # utime, stime, cutime, cstime
        rss += int(status.get("VmRSS", "0 kB").split()[0])
        peak += int(status.get("VmHWM", "0 kB").split()[0])
        threads += int(status["Threads"])
        fds += opened
    return ProcSample(
        time.monotonic(), len(pids), cpu / TICKS, rss / 1024, peak / 1024, threads, fds,
        connections(pids, port),
    )  # fmt: skip


class Sampler(threading.Thread):
    """Samples each pid every ``every_s`` until ``stop()``; ``samples[pid]`` in order."""

    def __init__(self, pids: list[int], port: int, every_s: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.pids, self.port, self.every_s = pids, port, every_s
        self.samples: dict[int, list[ProcSample]] = {pid: [] for pid in pids}
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            for pid in self.pids:
                self.samples[pid].append(sample(pid, self.port))
            self.stopped.wait(self.every_s)

    def stop(self) -> dict[int, list[ProcSample]]:
        self.stopped.set()
        self.join()
        for pid in self.pids:  # the window ends now, for every pid alike
            self.samples[pid].append(sample(pid, self.port))
        return self.samples


class BrokerJmx:
    """The broker's ``kafka.network`` request counters over a JMX agent started in it."""

    def __init__(self, broker_pid: int) -> None:
        """Start the broker's JMX agent on a free loopback port, or use the one it runs."""
        jcmd = ["jcmd", str(broker_pid)]
        status = subprocess.run(
            [*jcmd, "ManagementAgent.status"], check=True, capture_output=True, text=True
        ).stdout
        running = re.search(r"jmxremote\.port = (\d+)", status)
        self.port = int(running[1]) if running else kafka_infra.free_port()
        if running is None:
            subprocess.run(
                [*jcmd, "ManagementAgent.start", f"jmxremote.port={self.port}",
                 f"jmxremote.rmi.port={self.port}", "jmxremote.authenticate=false",
                 "jmxremote.ssl=false", f"jmxremote.host={kafka_infra.LOOPBACK}"],
                check=True, capture_output=True, timeout=60,
            )  # fmt: skip

    def requests(self) -> tuple[float, Counter[str]]:
        """When (the epoch's seconds, as JmxTool read them), and the requests served so far by
        type (all versions), the broker's internal ones left out."""
        url = f"service:jmx:rmi:///jndi/rmi://{kafka_infra.LOOPBACK}:{self.port}/jmxrmi"
        done = subprocess.run(
            ["java", "-Xmx128m", "-cp", f"{kafka_infra.libs_dir()}/*",
             "org.apache.kafka.tools.JmxTool", "--jmx-url", url, "--one-time", "true",
             "--object-name", "kafka.network:type=RequestMetrics,name=RequestsPerSec,*",
             "--attributes", "Count", "--report-format", "properties"],
            check=True, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        counts: Counter[str] = Counter()
        for request, count in re.findall(r"request=(\w+),version=\d+:Count=(\d+)", done.stdout):
            if request not in INTERNAL_REQUESTS:
                counts[request] += int(count)
        read = re.search(r"^time=(\d+)$", done.stdout, re.M)
        return (int(read[1]) / 1000 if read else time.time()), counts


REQUEST_TOTAL = re.compile(r"^apiserver_request_total\{(.*)\} (\S+)$", re.M)
LABEL = re.compile(r'(\w+)="([^"]*)"')


def apiserver_requests(kubeconfig: Path) -> tuple[float, Counter[str]]:
    """When (the epoch's seconds, halfway through the call), and ``apiserver_request_total``
    by "VERB resource[/subresource]", summed over the other labels."""
    asked = time.time()
    text = k8s.kubectl(kubeconfig, "get", "--raw", "/metrics", timeout=60)
    when = (asked + time.time()) / 2
    counts: Counter[str] = Counter()
    for labels, value in REQUEST_TOTAL.findall(text):
        found = dict(LABEL.findall(labels))
        resource = found.get("resource", "")
        if found.get("subresource"):
            resource += "/" + found["subresource"]
        counts[f"{found.get('verb', '')} {resource}"] += int(float(value))
    return when, counts


def api_rates(
    before: tuple[float, Counter[str]], after: tuple[float, Counter[str]]
) -> dict[str, float]:
    """Requests per minute between two ``apiserver_requests``, by "VERB resource", watches
    and the control plane's own heartbeats left out, most first."""
    minutes = (after[0] - before[0]) / 60
    return {
        key: round(count / minutes, 1)
        for key, count in (after[1] - before[1]).most_common()
        if not key.startswith("WATCH") and key.split()[-1].split("/")[0] not in BACKGROUND
    }


def writes(rates: dict[str, float]) -> float:
    """The writes among ``api_rates``, Events left out (``events``)."""
    return sum(
        rate
        for key, rate in rates.items()
        if key.split()[0] in WRITES and key.split()[-1].split("/")[0] != "events"
    )


def events(rates: dict[str, float]) -> float:
    """The Events posted among ``api_rates``: any component's (the apiserver's metrics do not
    say whose). After thousands of pods were made, the scheduler's and the controllers' trail
    the settle for minutes (rate-limited), into the window at rest."""
    return sum(rate for key, rate in rates.items() if key in ("POST events", "APPLY events"))


class FakeSidecars:
    """Answers ``/<pod>/status`` for every pod as a worker that applied the default
    ``max_poll_records`` and measured nothing yet (the tuner holds, and sees its value
    applied: with no answer at all, each group's tuning would stay pending for 150 s and end
    with a status write inside the window at rest)."""

    BODY = json.dumps({"worker": {"max_poll_records": 500}}).encode()

    def __init__(self) -> None:
        body = self.BODY

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # kept connections, as the sidecar keeps them
            # and TCP_NODELAY, as the sidecar sets it: a kept connection's answer is written in
            # two pieces (headers, body), and Nagle held the body for the client's delayed ACK,
            # 40 ms an answer (a 3,000-group run passed each group 2.7 times a minute, not 12)
            disable_nagle_algorithm = True

            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: object) -> None:
                pass

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: object, client_address: object) -> None:
                """An operator that gave up on an answer (its 1 s timeout on a busy machine)
                closed the connection: nothing to print."""
                if not isinstance(sys.exc_info()[1], ConnectionError):
                    super().handle_error(request, client_address)  # type: ignore[arg-type]

        self.server = Server((kafka_infra.LOOPBACK, 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        """The operator's ``--sidecar-url`` template."""
        return f"http://{kafka_infra.LOOPBACK}:{self.port}/{{pod}}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def port_of(bootstrap: str) -> int:
    return int(bootstrap.rsplit(":", 1)[1])


def broker_pid(bootstrap: str) -> int:
    pid = listening_pid(port_of(bootstrap))
    if pid is None:
        raise RuntimeError(f"no process listens on {bootstrap}")
    return pid
