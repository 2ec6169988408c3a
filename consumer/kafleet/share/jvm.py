"""The in-process JVM that runs Kafka's Java share consumer, and the jars it needs.

Owns: starting the JVM once per process (JPype: it can neither restart nor change its
classpath), with the client's classpath (``share.classpath``), the JVM options, Java's own
signal handlers left out (SIGTERM and SIGINT stay the worker's: a graceful drain, not the
JVM's halt) and the client's logging at WARN; the Java classes the package uses; and fetching
the client's jars from Maven Central with mvn (``kafleet share-jars DIR``). Every failure is a
``ConfigError`` naming ``share.classpath`` (or ``share.jvm_options``) with what to do.

Does not own any Kafka behaviour (``client.py``).
"""

from __future__ import annotations

import glob
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

from kafleet.errors import ConfigError, FieldProblem

CLIENT_VERSION = "4.3.1"  # Kafka's Java client, the version of the test broker
SLF4J_VERSION = "1.7.36"  # kafka-clients 4.3 logs through slf4j 1.7
REQUIRED_JAR = "kafka-clients-"
_lock = threading.Lock()
_started: tuple[str, ...] | None = None


def classpath_entries(classpath: str) -> list[str]:
    """The jars a classpath names: ``dir/*`` globbed, entries joined with ``:``."""
    jars: list[str] = []
    for entry in filter(None, classpath.split(":")):
        if entry.endswith("*"):
            jars.extend(sorted(glob.glob(entry + ".jar")))
        else:
            jars.append(entry)
    return jars


def start(classpath: str | None, options: list[str]) -> None:
    """Start the JVM with this classpath, once; a later call with another is an error."""
    global _started
    if classpath is None:
        raise ConfigError(
            [
                FieldProblem(
                    "share.classpath",
                    "share groups run Kafka's Java client: name its jars (fetch them with "
                    "`kafleet share-jars DIR`, then share.classpath: DIR/*)",
                )
            ]
        )
    jars = classpath_entries(classpath)
    missing = [jar for jar in jars if not Path(jar).is_file()]
    if not any(Path(jar).name.startswith(REQUIRED_JAR) for jar in jars) or missing:
        raise ConfigError(
            [
                FieldProblem(
                    "share.classpath",
                    f"{classpath!r} holds no kafka-clients jar"
                    + (f" ({missing[0]} does not exist)" if missing else "")
                    + ": fetch the jars with `kafleet share-jars DIR`",
                )
            ]
        )
    try:
        import jpype
    except ImportError as exc:
        raise ConfigError(
            [
                FieldProblem(
                    "group_type",
                    "share groups need JPype: pip install 'kafleet[share]' (and a Java 11+)",
                )
            ]
        ) from exc
    with _lock:
        if jpype.isJVMStarted():
            if _started is not None and _started != tuple(jars):
                raise ConfigError(
                    [
                        FieldProblem(
                            "share.classpath",
                            "this process's JVM runs with another classpath; one process "
                            "has one JVM",
                        )
                    ]
                )
            return
        try:
            jpype.startJVM(
                "-Xrs",  # no JVM handlers for SIGTERM or SIGINT: they stay Python's
                *options,
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                "-Dorg.slf4j.simpleLogger.logFile=System.err",
                classpath=jars,
                convertStrings=False,
                interrupt=False,
            )
        except jpype.JVMNotFoundException as exc:
            raise ConfigError(
                [
                    FieldProblem(
                        "share.classpath",
                        f"share groups run Kafka's Java client, and no Java was found ({exc}): "
                        "install a Java 11+ or set JAVA_HOME (the kafleet-spark image has one)",
                    )
                ]
            ) from exc
        except (OSError, RuntimeError, TypeError) as exc:
            raise ConfigError(
                [FieldProblem("share.jvm_options", f"the JVM did not start: {exc}")]
            ) from exc
        _started = tuple(jars)
        _wrap_classes()


# The Java classes kafleet calls, passes or gets back, wrapped once by the thread that starts
# the JVM. JPype wraps a class on first use and attaches its conversion hints last; a thread
# that matches arguments against a class another thread is still wrapping dereferences null
# hints and the process dies (SIGSEGV in JPHintsConversion::matches: two members' first polls).
CLASSES = (
    "java.lang.Short",
    "java.lang.Long",
    "java.lang.Integer",
    "java.time.Duration",
    "java.util.ArrayList",
    "java.util.Collection",
    "java.util.HashMap",
    "java.util.HashSet",
    "java.util.List",
    "java.util.Map",
    "java.util.Optional",
    "java.util.Properties",
    "java.util.Set",
    "java.util.concurrent.TimeUnit",
    "org.apache.kafka.clients.admin.Admin",
    "org.apache.kafka.clients.admin.AlterConfigOp",
    "org.apache.kafka.clients.admin.ConfigEntry",
    "org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec",
    "org.apache.kafka.clients.admin.SharePartitionOffsetInfo",
    "org.apache.kafka.clients.consumer.AcknowledgeType",
    "org.apache.kafka.clients.consumer.AcknowledgementCommitCallback",
    "org.apache.kafka.clients.consumer.ConsumerRecord",
    "org.apache.kafka.clients.consumer.ConsumerRecords",
    "org.apache.kafka.clients.consumer.KafkaShareConsumer",
    "org.apache.kafka.common.KafkaFuture",
    "org.apache.kafka.common.TopicIdPartition",
    "org.apache.kafka.common.TopicPartition",
    "org.apache.kafka.common.config.ConfigResource",
    "org.apache.kafka.common.errors.WakeupException",
    "org.apache.kafka.common.header.Header",
    "org.apache.kafka.common.header.Headers",
    "org.apache.kafka.common.header.internals.RecordHeader",
    "org.apache.kafka.common.header.internals.RecordHeaders",
)


def _wrap_classes() -> None:
    import jpype

    for name in CLASSES:
        try:
            jpype.JClass(name)
        except Exception as exc:  # a kafka-clients from before share groups
            raise ConfigError(
                [
                    FieldProblem(
                        "share.classpath",
                        f"it has no {name} ({exc}): share groups need kafka-clients "
                        f"{CLIENT_VERSION} (`kafleet share-jars DIR` fetches it)",
                    )
                ]
            ) from exc


def java(name: str) -> Any:
    """A Java class by its name (the JVM must be started)."""
    import jpype

    return jpype.JClass(name)


POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.kafleet</groupId><artifactId>share-client-jars</artifactId><version>0</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-clients</artifactId>
      <version>{kafka}</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-simple</artifactId>
      <version>{slf4j}</version></dependency>
  </dependencies>
</project>
"""


def fetch_jars(into: Path, version: str = CLIENT_VERSION) -> Path:
    """Fetch kafka-clients ``version``, its runtime dependencies and a logger into ``into``
    with mvn (once: a folder marked complete is kept); return the folder."""
    into = into.resolve()
    marker = into / ".complete"
    if marker.exists():
        return into
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ConfigError(
            [FieldProblem("share.classpath", "mvn fetches the jars: install Maven (and Java)")]
        )
    with tempfile.TemporaryDirectory() as tmp:
        pom = Path(tmp) / "pom.xml"
        pom.write_text(POM.format(kafka=version, slf4j=SLF4J_VERSION))
        partial = into.with_name(into.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        done = subprocess.run(
            [
                mvn,
                "-q",
                "-B",
                "-f",
                str(pom),
                "dependency:copy-dependencies",
                "-DincludeScope=runtime",
                f"-DoutputDirectory={partial}",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise ConfigError(
                [
                    FieldProblem(
                        "share.classpath",
                        f"mvn could not fetch kafka-clients {version} (exit {done.returncode}): "
                        f"{(done.stdout + done.stderr)[-2000:]}",
                    )
                ]
            )
        shutil.rmtree(into, ignore_errors=True)
        into.parent.mkdir(parents=True, exist_ok=True)
        partial.rename(into)
    marker.write_text(version + "\n")
    return into
