"""What a Spark job is and what it is given: ``job(df, info)``, like ``foreachBatch``, with the
batch's ``BatchInfo`` (its partition, offsets and counts, and the options that make a Delta
write of it idempotent).

Owns: ``BatchInfo``, the ``Job`` type and the transaction identifier of a partition's output
(``txn_app_id``: group/topic/partition, whose ``txnVersion`` is a batch's last offset).

Does not own running jobs (``sink.py``) nor reading identifiers back (``delta_log.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


@dataclass(frozen=True)
class BatchInfo:
    """What a job is given with each batch's DataFrame."""

    group_id: str
    topic: str
    partition: int
    first_offset: int  # of the first record in the batch
    last_offset: int  # of the last record in the batch: the txnVersion
    records: int
    rows: int
    table: str | None
    idempotent: bool = True

    @property
    def app_id(self) -> str:
        return txn_app_id(self.group_id, self.topic, self.partition)

    @property
    def range_predicate(self) -> str:
        """The batch's rows in the table, by their coordinates (for ``replaceWhere``)."""
        topic = "'" + self.topic.replace("\\", "\\\\").replace("'", "\\'") + "'"
        return (
            f"kafka_topic = {topic} AND kafka_partition = {self.partition} "
            f"AND kafka_offset BETWEEN {self.first_offset} AND {self.last_offset}"
        )

    @property
    def write_options(self) -> dict[str, str]:
        """Pass these to the Delta write (``.options(**info.write_options)``): when writes are
        idempotent (``spark.idempotent``, always with exactly-once) a batch written again (a
        retry after a lost answer, a replay after a crash) is skipped by Delta."""
        if not self.idempotent:
            return {}
        return {"txnAppId": self.app_id, "txnVersion": str(self.last_offset)}


Job = Callable[["DataFrame", BatchInfo], object]


def txn_app_id(group_id: str, topic: str, partition: int) -> str:
    return f"{group_id}/{topic}/{partition}"
