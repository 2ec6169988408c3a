"""Building the Spark session a sink writes through, from the ``spark`` settings.

Owns: an in-process session on ``spark.master`` (``local[*]``) with Delta Lake, the configured
jars (folders of jars expanded) and partition counts sized to the local master; a Spark Connect
client for ``spark.remote``, a new server-side session each time, failing fast when the server
is unreachable; the defaults every session gets, under ``spark.conf``; and ``spark.schema_ddl``
read as an Arrow schema.

Does not own when a session is built, kept or dropped after a failure, nor writing through it
(``sink.py``), nor a Spark Connect server (``connect.py``).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from kafleet.config.spark import SparkSettings
from kafleet.errors import ConfigError, FieldProblem, SinkError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

# Small, frequent commits are what a sink makes: Delta's checksum file (a full state summary
# written with every commit) is most of the cost of a small append; readers do not need it.
SESSION_DEFAULTS = {"spark.databricks.delta.writeChecksumFile.enabled": "false"}
# The in-process Spark is one worker's, not a cluster's: a cluster's 200 shuffle partitions and
# Delta's 50 snapshot partitions made each exactly-once commit (which reads the table's
# transactions) take 9-12 s instead of about 2 on two cores. They default to the local
# master's cores (``local_defaults``); ``spark.conf`` overrides them.
LOCAL_SIZED = ("spark.sql.shuffle.partitions", "spark.databricks.delta.snapshotPartitions")


def local_defaults(master: str) -> dict[str, str]:
    """Partition counts sized for an in-process master: ``local[N]`` -> N, ``local[*]`` ->
    this machine's cores, ``local`` -> 1 (a master that is not local gets none)."""
    match = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\d+)?\])?", master.strip())
    if match is None:
        return {}
    cores = match.group(1)
    count = 1 if cores is None else (os.cpu_count() or 1) if cores == "*" else int(cores)
    return {key: str(max(1, count)) for key in LOCAL_SIZED}


def build_session(settings: SparkSettings, group_id: str) -> SparkSession:
    """A session for ``settings``; ``SinkError`` (where Spark runs) if it cannot start."""
    from pyspark.sql import SparkSession

    try:
        if settings.remote:
            builder = SparkSession.builder.remote(settings.remote)
            for key, value in {**SESSION_DEFAULTS, **settings.conf}.items():
                builder = builder.config(key, value)
            session = builder.create()  # a new server-side session, not a cached broken one
            _fail_fast(session)
            return session
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # a job's UDFs: this Python
        builder = (
            SparkSession.builder.master(settings.master)
            .appName(f"kafleet-{group_id}")
            .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
            .config(
                "spark.sql.catalog.spark_catalog",
                "org.apache.spark.sql.delta.catalog.DeltaCatalog",
            )
            .config("spark.ui.showConsoleProgress", "false")
        )
        jars = _jar_files(settings.jars)
        if jars:
            builder = builder.config("spark.jars", ",".join(jars))
        local = local_defaults(settings.master)
        for key, value in {**SESSION_DEFAULTS, **local, **settings.conf}.items():
            builder = builder.config(key, value)
        return builder.getOrCreate()
    except Exception as exc:
        where = settings.remote or settings.master
        raise SinkError(where, f"cannot start a Spark session: {exc}") from exc


def parse_schema(ddl: str) -> pa.Schema:
    """``spark.schema_ddl`` as an Arrow schema; ``ConfigError`` if it is not a list of columns."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import DataType, StructType

    try:
        struct = DataType.fromDDL(ddl)
    except Exception as exc:
        raise ConfigError([FieldProblem("spark.schema_ddl", f"not Spark DDL: {exc}")]) from exc
    if not isinstance(struct, StructType):
        raise ConfigError([FieldProblem("spark.schema_ddl", "must be a list of columns")])
    return to_arrow_schema(struct)


def _fail_fast(session: SparkSession) -> None:
    """The Connect client retries an unreachable server for ten minutes by default, which would
    hide an outage inside one write. Retry briefly instead; the shipper backs off, retries and
    reports the outage in the worker's health."""
    from pyspark.sql.connect.client.retries import DefaultPolicy

    client = getattr(session, "client", None)
    if client is None:
        return
    policies = [
        DefaultPolicy(max_retries=3, initial_backoff=100, max_backoff=1000)
        if isinstance(policy, DefaultPolicy)
        else policy
        for policy in client.get_retry_policies()
    ]
    client.set_retry_policies(policies)


def _jar_files(entries: list[str]) -> list[str]:
    """Jar files, folders of jars expanded; a missing entry is a configuration error."""
    jars: list[str] = []
    for entry in entries:
        path = Path(entry)
        if path.is_dir():
            jars.extend(str(j) for j in sorted(path.glob("*.jar")))
        elif path.is_file():
            jars.append(str(path))
        else:
            raise ConfigError([FieldProblem("spark.jars", f"{entry} does not exist")])
    return jars
