"""The ``spark`` section of the configuration: where handler results go and how they are batched.

Owns: the settings of the Spark sink with their defaults, units and bounds: where Spark runs
(in-process ``local[*]`` by default, or a Spark Connect server named by ``remote``), the job
(the default appends to the Delta table at ``table``; ``job`` names a ``module:function``
instead), the schema of the rows, the batch bounds, concurrent writers and the backoff of a
failing write. ``ConsumerConfig.spark`` holds one; the CRD's ``spec.spark`` is the same model.

Does not own building sessions (``spark/session.py``) or writing (``spark/sink.py``) or
batching (``batcher.py``, ``shipping.py``).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic import field_validator as validates
from pydantic_settings import NoDecode

_Strict = ConfigDict(frozen=True, extra="forbid")


class BatchSettings(BaseModel):
    """When a partition's results are cut into a batch and written: whichever bound comes first."""

    model_config = _Strict

    max_records: int = Field(
        5000,
        ge=1,
        le=1_000_000,
        description="results per batch at most; at most queue.max_records (results waiting "
        "for their batch count against the partition's queue)",
    )
    max_bytes: int = Field(
        16 * 1024 * 1024,
        ge=1024,
        description="bytes per batch at most (of the records' keys and values)",
    )
    linger_ms: int = Field(
        1000, ge=0, le=600_000, description="how long a result waits for its batch to fill"
    )


class SparkSettings(BaseModel):
    """Ship handler results in batches to a Spark job (see ARCHITECTURE.md)."""

    model_config = _Strict

    remote: str | None = Field(
        None,
        pattern=r"^sc://[^/]+",
        description="a Spark Connect server (sc://host:15002), how a real cluster is used; "
        "unset: Spark runs in the worker's process",
    )
    master: str = Field("local[*]", min_length=1, description="the in-process Spark's master")
    table: str | None = Field(
        None, description="the Delta table (a path or URI) the default job appends to"
    )
    job: str | None = Field(
        None,
        pattern=r"^[\w.]+:\w+$",
        description="module:function called as job(df, batch_info) instead of the Delta "
        "append (like foreachBatch)",
    )
    schema_ddl: str | None = Field(
        None,
        description="the rows' schema as Spark DDL ('id BIGINT, name STRING'); unset: "
        "inferred from each partition's first batch and kept",
    )
    coordinates: bool = Field(
        True,
        description="add kafka_topic, kafka_partition, kafka_offset, kafka_timestamp and "
        "kafka_key columns to every row",
    )
    idempotent: bool | None = Field(
        None,
        description="write each batch with Delta's txnAppId/txnVersion, so a batch written "
        "again lands once (each write then reads the table's transactions: slower); unset: on "
        "with guarantee exactly-once, which needs it, off otherwise",
    )
    jars: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="jar files or folders for the in-process Spark (Delta's); `make "
        "delta-jars` fetches them into .cache/spark",
    )
    conf: dict[str, str] = Field(
        default_factory=dict, description="more Spark properties for the session"
    )
    batch: BatchSettings = Field(default_factory=BatchSettings)
    writers: int = Field(
        2, ge=1, le=64, description="batches written at once (of different partitions)"
    )
    retry_backoff_ms: int = Field(
        500, ge=1, description="wait after a failed write before the next attempt"
    )
    max_retry_backoff_ms: int = Field(
        30_000, ge=1, description="the longest wait between attempts; writes retry forever"
    )

    @validates("jars", mode="before")
    @classmethod
    def _split_jars(cls, value: object) -> object:
        if isinstance(value, str):  # "a.jar,b.jar" from an environment variable
            return [j.strip() for j in value.split(",") if j.strip()]
        return value

    @model_validator(mode="after")
    def _job_or_table(self) -> SparkSettings:
        if self.table is None and self.job is None:
            raise ValueError("give table (the Delta append) or job (module:function)")
        if self.max_retry_backoff_ms < self.retry_backoff_ms:
            raise ValueError("max_retry_backoff_ms must not be below retry_backoff_ms")
        return self
