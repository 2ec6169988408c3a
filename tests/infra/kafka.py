"""A real single-node Apache Kafka broker for the tests, the benchmarks and the demo.

Owns: fetching the broker's jars from Maven Central (``mvn dependency:copy-dependencies`` on
``kafka-pom.xml``) into ``.cache/kafka/<version>/libs``, formatting a combined KRaft node
(broker and controller in one JVM) on free loopback ports, enabling share groups, waiting until
it answers, and stopping it by its own pid. Everything it writes lives under ``.cache/``.

Listeners: PLAINTEXT (the default every test uses) and, beside it, SASL_PLAINTEXT with
SCRAM-SHA-512 and SCRAM-SHA-256 (``KafkaBroker.sasl``) for the tests of clients that
authenticate. Its one user's credentials are written into the metadata log when the storage is
formatted (``StorageTool format --add-scram``, KIP-900), so they exist before the broker starts.
For the real node's pods: PODS (PLAINTEXT) and PODS_SSL (TLS, ``KafkaBroker.pods_ssl``), both
advertised at ``PODS_HOST``; PODS_SSL serves a certificate for that address signed by a CA of
its own (``tests/infra/pki.py``: ``broker``), given to Kafka as PEM (``ssl.keystore.type=PEM``,
KIP-651), which a client trusts through the CA's file.

Does not own: topics, producers or consumers (``tests/conftest.py`` builds those on top), nor
any Kafka configuration that a test should choose for itself.

Command line, used by the Makefile (``make kafka-up`` / ``make kafka-down``)::

    python -m tests.infra.kafka up      # start (or reuse) the development broker, print bootstrap
    python -m tests.infra.kafka down    # stop it
    python -m tests.infra.kafka status  # print its bootstrap address, exit 1 if it is not running
    python -m tests.infra.kafka jars    # only fetch the jars

Why 4.3.1: it is the newest Kafka 4.x release whose artifacts are all on Maven Central
(``kafka_2.13`` 4.4.0 is there, but ``kafka-tools`` 4.4.0, which holds FeatureCommand, is not),
and the storage tool and the broker must be the same version.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.infra import processes
from tests.infra.ports import free_port

KAFKA_VERSION = os.environ.get("KAFLEET_KAFKA_VERSION", "4.3.1")
REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE = REPO_ROOT / ".cache" / "kafka"
POM = Path(__file__).with_name("kafka-pom.xml")
LOOPBACK = "127.0.0.1"
# The real node's pod bridge (tests/infra/node.py): pods reach the host at its gateway address.
POD_GATEWAY = "10.244.0.1"
POD_SUBNET = "10.244.0.0/24"
# Where pods reach this host: the bridge's gateway on the test bed; on a user's cluster
# (make kind-e2e) the host's address on that cluster's network.
PODS_HOST = os.environ.get("KAFLEET_E2E_BROKER_HOST") or POD_GATEWAY
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0
SCRAM_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")
SASL_USER = "kafleet-tester"
SASL_PASSWORD = "a-test-bed-secret"  # a throwaway broker's throwaway user


class TestbedError(RuntimeError):
    """The test bed could not provide a component; the message says what is missing and why."""

    __test__ = False  # not a test class, whatever pytest's name heuristics think


def _require(tool: str, why: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise TestbedError(
            f"'{tool}' was not found on PATH; {why}. Install it (Debian: "
            f"apt-get install {'openjdk-17-jre-headless' if tool == 'java' else 'maven'}) "
            "and run again."
        )
    return path


def libs_dir(version: str = KAFKA_VERSION) -> Path:
    """Fetch the broker's jars once (reused when present) and return their folder."""
    libs = CACHE / version / "libs"
    marker = libs / ".complete"
    if marker.exists():
        return libs
    mvn = _require("mvn", "Maven fetches the Kafka broker's jars from Maven Central")
    _require("java", "the Kafka broker is a Java program (Java 17 or newer)")
    tmp = libs.with_name("libs.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    cmd = [
        mvn,
        "-q",
        "-B",
        "-f",
        str(POM),
        "dependency:copy-dependencies",
        f"-Dkafka.version={version}",
        f"-DoutputDirectory={tmp}",
        "-DincludeScope=runtime",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise TestbedError(
            f"mvn could not fetch Apache Kafka {version}'s jars (exit {done.returncode}):\n"
            f"{(done.stdout + done.stderr)[-3000:]}"
        )
    shutil.rmtree(libs, ignore_errors=True)
    tmp.rename(libs)
    marker.write_text(version + "\n")
    return libs


def new_cluster_id() -> str:
    """A random cluster id, as Kafka's ``Uuid.randomUuid()`` makes them: URL-safe base64 of 16
    random bytes that never starts with "-" (the storage tool would take it for an option)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""


@dataclass(frozen=True)
class SaslListener:
    """The broker's SASL_PLAINTEXT listener and the SCRAM user it knows."""

    bootstrap: str
    username: str = SASL_USER
    password: str = SASL_PASSWORD
    mechanism: str = SCRAM_MECHANISMS[0]

    def properties(self, password: str | None = None) -> dict[str, str]:
        """librdkafka properties that authenticate (with another ``password`` to fail)."""
        return {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": self.mechanism,
            "sasl.username": self.username,
            "sasl.password": self.password if password is None else password,
        }


@dataclass(frozen=True)
class SslListener:
    """The broker's TLS listener for pods and the CA file that verifies it."""

    bootstrap: str
    ca_path: Path


@dataclass
class KafkaBroker:
    """One combined KRaft node whose data, config and log live in ``workdir``.

    ``start`` formats the storage the first time; ``stop`` then ``start`` restarts the same node
    with its data, on the same ports, which is what broker-outage tests need. ``sasl_port`` 0
    means no SASL listener. ``pods_port`` is a listener for the real node's pods: bound on every
    address (so it serves whether or not the node's bridge exists yet) and advertised as the
    bridge's gateway, the host address pods reach; 0 means none. ``pods_ssl_port`` is the same
    with TLS (its certificate and CA in ``workdir/tls``); 0 means none.
    """

    workdir: Path
    port: int
    controller_port: int
    version: str = KAFKA_VERSION
    pid: int | None = None
    sasl_port: int = 0
    pods_port: int = 0
    pods_ssl_port: int = 0

    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def pods_bootstrap(self) -> str:
        """The address pods on the real node use (they cannot reach the host's loopback)."""
        if not self.pods_port:
            raise TestbedError("this broker was started without a listener for pods")
        return f"{PODS_HOST}:{self.pods_port}"

    @property
    def pods_ssl(self) -> SslListener:
        """The TLS listener pods use, and the CA (a PEM file) that a client must trust."""
        if not self.pods_ssl_port:
            raise TestbedError("this broker was started without a TLS listener for pods")
        return SslListener(f"{PODS_HOST}:{self.pods_ssl_port}", self._tls_dir / "ca.crt")

    @property
    def _tls_dir(self) -> Path:
        return self.workdir / "tls"

    @property
    def sasl(self) -> SaslListener:
        if not self.sasl_port:
            raise TestbedError("this broker was started without a SASL listener")
        return SaslListener(f"{LOOPBACK}:{self.sasl_port}")

    @property
    def log_path(self) -> Path:
        return self.workdir / "broker.log"

    @property
    def _config_path(self) -> Path:
        return self.workdir / "server.properties"

    def _listeners(self, advertised: bool = False) -> str:
        sasl = f"SASL_PLAINTEXT://{LOOPBACK}:{self.sasl_port}," if self.sasl_port else ""
        pods_host = PODS_HOST if advertised else "0.0.0.0"
        pods = f",PODS://{pods_host}:{self.pods_port}" if self.pods_port else ""
        if self.pods_ssl_port:
            pods += f",PODS_SSL://{pods_host}:{self.pods_ssl_port}"
        return (
            f"PLAINTEXT://{LOOPBACK}:{self.port},{sasl}"
            f"CONTROLLER://{LOOPBACK}:{self.controller_port}{pods}"
        )

    def _sasl_properties(self) -> dict[str, str | int]:
        """The SASL_PLAINTEXT listener's SCRAM mechanisms; the brokers' own traffic stays on
        PLAINTEXT, so the server side's JAAS entry needs no credentials of its own."""
        if not self.sasl_port:
            return {}
        prefix = "listener.name.sasl_plaintext"
        return {
            f"{prefix}.sasl.enabled.mechanisms": ",".join(SCRAM_MECHANISMS),
            **{
                f"{prefix}.{mechanism.lower()}.sasl.jaas.config": (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                )
                for mechanism in SCRAM_MECHANISMS
            },
        }

    def _ssl_properties(self) -> dict[str, str | int]:
        """The PODS_SSL listener's key and certificate chain, inline as PEM (a file-based PEM
        keystore wants an encrypted key); no client certificate is asked for."""
        if not self.pods_ssl_port:
            return {}
        from tests.infra import pki  # pki imports this module's names

        if not (self._tls_dir / "broker.crt").exists():
            pki.broker(self._tls_dir, (PODS_HOST,))
        prefix = "listener.name.pods_ssl"

        def inline(name: str) -> str:  # java.util.Properties reads "\n" as a newline
            return (self._tls_dir / name).read_text().strip().replace("\n", "\\n")

        return {
            f"{prefix}.ssl.keystore.type": "PEM",
            f"{prefix}.ssl.keystore.key": inline("broker.key"),
            f"{prefix}.ssl.keystore.certificate.chain": inline("broker.crt"),
            f"{prefix}.ssl.client.auth": "none",
        }

    def _properties(self) -> dict[str, str | int]:
        return {
            "process.roles": "broker,controller",
            "node.id": 1,
            "controller.quorum.bootstrap.servers": f"{LOOPBACK}:{self.controller_port}",
            "listeners": self._listeners(),
            "advertised.listeners": self._listeners(advertised=True),
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,"
            "SASL_PLAINTEXT:SASL_PLAINTEXT,PODS:PLAINTEXT,PODS_SSL:SSL",
            **self._sasl_properties(),
            **self._ssl_properties(),
            "log.dirs": str(self.workdir / "data"),
            # One node: every internal topic must have replication factor 1, or it never forms.
            "offsets.topic.replication.factor": 1,
            "offsets.topic.num.partitions": 10,
            "transaction.state.log.replication.factor": 1,
            "transaction.state.log.min.isr": 1,
            "share.coordinator.state.topic.replication.factor": 1,
            "share.coordinator.state.topic.min.isr": 1,
            "share.coordinator.state.topic.num.partitions": 5,
            # Fast tests: no wait for more members before the first rebalance, and KIP-848
            # members heartbeat (and so learn new assignments) every second, not every 5 s.
            "group.initial.rebalance.delay.ms": 0,
            "group.consumer.heartbeat.interval.ms": 1000,
            "group.consumer.min.heartbeat.interval.ms": 1000,
            # Share groups the same, and a killed member's session ends in 6 s, not 45 s; a
            # group may lock records for 1 s (tests of lock expiry), not 15 s at least.
            "group.share.heartbeat.interval.ms": 1000,
            "group.share.min.heartbeat.interval.ms": 1000,
            "group.share.session.timeout.ms": 6000,
            "group.share.min.session.timeout.ms": 6000,
            "group.share.min.record.lock.duration.ms": 1000,
            # Tests create their topics explicitly; a typo must not create a new topic silently.
            "auto.create.topics.enable": "false",
            "num.partitions": 1,
        }

    def _java(self, main: str, *args: str, log: bool = False) -> list[str]:
        java = _require("java", "the Kafka broker is a Java program (Java 17 or newer)")
        cmd = [java, "-Xms128m", "-Xmx1g", "-XX:+UseG1GC", "-Djava.awt.headless=true"]
        if log:
            cmd.append(f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}")
        else:
            cmd.append("-Dlog4j2.level=WARN")
        return [*cmd, "-cp", str(libs_dir(self.version) / "*"), main, *args]

    def _tool(self, main: str, *args: str, timeout: float = 60.0) -> str:
        done = subprocess.run(
            self._java(main, *args), capture_output=True, text=True, timeout=timeout, check=False
        )
        if done.returncode != 0:
            raise TestbedError(
                f"{main} {' '.join(args)} failed (exit {done.returncode}):\n"
                f"{(done.stdout + done.stderr)[-3000:]}"
            )
        return done.stdout

    def _quorum_arguments(self) -> list[str]:
        """The storage tool's cluster id and quorum: a new cluster of this one node."""
        return ["--cluster-id", new_cluster_id(), "--standalone"]

    def _format(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._config_path.write_text(
            "".join(f"{key}={value}\n" for key, value in self._properties().items())
        )
        (self.workdir / "log4j2.properties").write_text(LOG4J2.format(log=self.log_path))
        self._tool(
            "kafka.tools.StorageTool",
            "format",
            "--config",
            str(self._config_path),
            *self._quorum_arguments(),
            "--feature",
            "share.version=1",
            *(
                arg
                for mechanism in (SCRAM_MECHANISMS if self.sasl_port else ())
                for arg in (
                    "--add-scram",
                    f"{mechanism}=[name={SASL_USER},password={SASL_PASSWORD}]",
                )
            ),
        )

    def start(self, timeout: float = START_TIMEOUT_S) -> None:
        """Start the node (formatting it on first use) and wait until it serves metadata."""
        if self.launch():
            self.wait_ready(timeout)

    def launch(self) -> bool:
        """Start the node's process (formatting it on first use) without waiting for it;
        False if it was running already."""
        if self.pid is not None and processes.alive(self.pid):
            return False
        if not (self.workdir / "data" / "meta.properties").exists():
            self._format()
        self.pid = processes.spawn(
            self._java("kafka.Kafka", str(self._config_path), log=True),
            self.workdir / "stdout.log",
        )
        self._save_state()
        return True

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> None:
        """Wait until the node serves metadata naming at least one broker."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if self.pid is None or not processes.alive(self.pid):
                raise TestbedError(
                    f"the Kafka broker exited while starting; its log ({self.log_path}) ends:\n"
                    f"{self.log_tail()}"
                )
            try:
                metadata = admin.list_topics(timeout=2)
                if metadata.brokers:
                    return
            except Exception as exc:  # noqa: BLE001 - any failure here means "not ready yet"
                last_error = exc
            time.sleep(0.2)
        self.stop()
        raise TestbedError(
            f"the Kafka broker did not answer on {self.bootstrap} within {timeout:.0f} s "
            f"(last error: {last_error}); its log ({self.log_path}) ends:\n{self.log_tail()}"
        )

    def features(self) -> dict[str, int]:
        """Finalized feature levels, read with Kafka's own FeatureCommand."""
        out = self._tool(
            "org.apache.kafka.tools.FeatureCommand",
            "--bootstrap-server",
            self.bootstrap,
            "describe",
        )
        # Lines read "Feature: share.version  SupportedMinVersion: 0  ...  FinalizedVersionLevel: 1"
        # (metadata.version's level is a release name such as 4.3-IV0, so it is left out).
        pattern = re.compile(r"Feature:\s*(\S+).*?FinalizedVersionLevel:\s*(-?\d+)(?=\s|$)")
        return {m[1]: int(m[2]) for m in map(pattern.search, out.splitlines()) if m}

    def ensure_share_groups(self) -> None:
        """Share groups need ``share.version`` >= 1; upgrade if the format did not set it."""
        if self.features().get("share.version", 0) >= 1:
            return
        self._tool(
            "org.apache.kafka.tools.FeatureCommand",
            "--bootstrap-server",
            self.bootstrap,
            "upgrade",
            "--feature",
            "share.version=1",
        )
        level = self.features().get("share.version", 0)
        if level < 1:
            raise TestbedError(f"share.version is {level} after the upgrade; share groups are off")

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Stop the node by its own pid: SIGTERM (a clean shutdown), SIGKILL if it hangs."""
        processes.stop(self.pid, timeout)
        self.pid = None
        self._save_state()

    def kill(self) -> None:
        """Stop the node at once, without a clean shutdown (SIGKILL)."""
        processes.kill(self.pid)
        self.pid = None
        self._save_state()

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return "(no broker log yet)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def _save_state(self) -> None:
        state = {
            "port": self.port,
            "controller_port": self.controller_port,
            "pid": self.pid,
            "version": self.version,
            "sasl_port": self.sasl_port,
            "pods_port": self.pods_port,
            "pods_ssl_port": self.pods_ssl_port,
        }
        (self.workdir / "broker.json").write_text(json.dumps(state))

    @classmethod
    def load(cls, workdir: Path) -> KafkaBroker | None:
        """The broker whose state ``workdir`` holds, or None if there is none."""
        try:
            state = json.loads((workdir / "broker.json").read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        return cls(
            workdir,
            state["port"],
            state["controller_port"],
            state["version"],
            state["pid"],
            state.get("sasl_port", 0),
            state.get("pods_port", 0),
            state.get("pods_ssl_port", 0),
        )


def start_broker(workdir: Path) -> KafkaBroker:
    """A fresh node in ``workdir`` (emptied first), started, with share groups enabled."""
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    broker = KafkaBroker(
        workdir,
        free_port(),
        free_port(),
        sasl_port=free_port(),
        pods_port=free_port(),
        pods_ssl_port=free_port(),
    )
    broker.start()
    try:
        broker.ensure_share_groups()
    except BaseException:
        broker.stop()
        raise
    return broker


DEV_WORKDIR = CACHE / "dev"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.infra.kafka",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", choices=["up", "down", "status", "jars"])
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="up: say only that a broker was started (make demo), not its addresses",
    )
    args = parser.parse_args(argv)
    try:
        if args.command == "jars":
            print(libs_dir())
            return 0
        broker = KafkaBroker.load(DEV_WORKDIR)
        running = broker is not None and broker.pid is not None and processes.alive(broker.pid)
        if args.command == "status":
            if running and broker is not None:
                print(broker.bootstrap)
                return 0
            print("the development broker is not running (make kafka-up)", file=sys.stderr)
            return 1
        if args.command == "down":
            if broker is not None:
                broker.stop()
                print(f"stopped the development broker on {broker.bootstrap}", file=sys.stderr)
            return 0
        if running and broker is not None:
            if not args.quiet:
                _say_pods(broker)
                print(broker.bootstrap)
            return 0
        started = time.monotonic()
        broker = start_broker(DEV_WORKDIR)
        print(
            f"Kafka {broker.version} is up on {broker.bootstrap} (pid {broker.pid}, "
            f"{time.monotonic() - started:.1f} s); log: {broker.log_path}",
            file=sys.stderr,
        )
        if not args.quiet:
            _say_pods(broker)
            print(broker.bootstrap)
        return 0
    except TestbedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _say_pods(broker: KafkaBroker) -> None:
    """Where pods reach the broker: a ConsumerGroup's ``bootstrap_servers`` on the real node."""
    if broker.pods_port:
        print(f"pods on the real node (make node-up) reach it at {broker.pods_bootstrap}",
              file=sys.stderr)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
