"""A batch as one Arrow table: the rows handlers gave and the tables batch handlers gave,
fitted to one schema, with the Kafka coordinates as columns.

Owns: a handler's result as rows (``to_rows``: a dict, a pydantic model, a dataclass, a
NamedTuple, or a list of them); the schema each partition's batches must fit (declared as DDL,
or inferred from the partition's first batch and kept); checking results as they arrive (rows
whose fields are not in the schema, or that take the coordinates' names; a table's columns
likewise); converting a ``Batch`` (``batcher.py``) in one go: rows through
``pa.Table.from_pylist``, a batch handler's tables as they are (sliced, columns cast to the
schema: no Python object per row); naming the first record whose result does not fit; the
coordinates columns (topic, partition, offset, timestamp, key), built from the records or,
for tables, from the client's messages.

Does not own the Spark session (``spark/session.py``), jobs or writing (``spark/sink.py``),
nor which results form a batch (``batcher.py``).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE
from pydantic import BaseModel

from kafleet.engine.handlers import TableRows
from kafleet.engine.partition_state import TP
from kafleet.engine.record import Record, of_message
from kafleet.engine.runs import offset_of
from kafleet.errors import ResultError
from kafleet.spark.batcher import Batch, Row

if TYPE_CHECKING:
    import pyarrow as pa

COORDINATES = ("kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp", "kafka_key")
COORDINATES_SET = frozenset(COORDINATES)
ARROW_ERRORS: tuple[type[Exception], ...] = (TypeError, ValueError, OverflowError)


def to_rows(record: Record, result: Any) -> list[Row]:
    """A handler's result as rows; raises ``ResultError`` naming the record if it is not one."""
    if isinstance(result, dict):
        return [result]
    if isinstance(result, BaseModel):
        return [result.model_dump()]
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        return [dataclasses.asdict(result)]
    if isinstance(result, tuple) and hasattr(result, "_asdict"):
        return [result._asdict()]
    if isinstance(result, list | tuple):
        return [row for item in result for row in to_rows(record, item)]
    raise ResultError(
        record,
        f"the handler returned {type(result).__name__}; return a dict, a pydantic model, a "
        "dataclass, a NamedTuple, a list of them, or None for no row",
    )


class ArrowBatches:
    def __init__(self, coordinates: bool) -> None:
        self.coordinates = coordinates
        self.declared: pa.Schema | None = None  # set once the session parsed the DDL
        self._inferred: dict[TP, pa.Schema] = {}

    def schema(self, tp: TP) -> pa.Schema | None:
        return self.declared or self._inferred.get(tp)

    # -- checks, as results arrive (handler threads) ------------------------------------

    def check_rows(self, record: Record, rows: list[Row]) -> None:
        schema = self.schema(record.tp)
        for row in rows:
            self._check_names(record, row.keys(), schema)

    def check_table(self, tp: TP, table: TableRows) -> None:
        names = table.table.schema.names
        first = of_message(*tp, table.messages[0])
        if len(set(names)) < len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise ResultError(first, f"its batch's table has columns {twice} more than once")
        self._check_names(first, names, self.schema(tp))

    def _check_names(self, record: Record, names: Any, schema: pa.Schema | None) -> None:
        if self.coordinates and not COORDINATES_SET.isdisjoint(names):
            raise ResultError(
                record,
                f"fields {sorted(COORDINATES_SET.intersection(names))} "
                "are the Kafka coordinates' columns (spark.coordinates)",
            )
        if schema is not None and not set(schema.names).issuperset(names):
            raise ResultError(
                record,
                f"fields {sorted(set(names) - set(schema.names))} are not in the schema "
                f"({', '.join(schema.names)})",
            )

    # -- a batch, converted (a writer thread) ---------------------------------------------

    def convert(self, batch: Batch) -> pa.Table | None:
        """The batch as one table (None if its records gave no rows); ``ResultError`` names
        the record that does not fit."""
        import pyarrow as pa

        tp = (batch.topic, batch.partition)
        parts: list[pa.Table] = []
        flat = [row for rows in batch.rows for row in rows]
        if flat:
            parts.append(self._from_rows(tp, batch, flat))
        for table in batch.tables:
            parts.append(self._from_table(tp, table))
        if not parts:
            return None
        try:
            table = (
                parts[0]
                if len(parts) == 1
                else pa.concat_tables(parts, promote_options="permissive")
            )
        except (pa.ArrowException, *ARROW_ERRORS) as exc:  # no schema yet, types differ
            raise ResultError(
                _first_record(batch), f"the batch's results disagree on their columns: {exc}"
            ) from exc
        # One chunk per run's table would become one Spark partition (and one file) each.
        chunked = table.num_columns and table.column(0).num_chunks > 1
        return table.combine_chunks() if chunked else table

    def _from_rows(self, tp: TP, batch: Batch, flat: list[Row]) -> pa.Table:
        import pyarrow as pa

        schema = self.schema(tp)
        try:
            table = pa.Table.from_pylist(flat, schema=schema)
        except (pa.ArrowException, *ARROW_ERRORS) as exc:
            raise self._culprit(batch, schema, exc) from exc
        self._keep(tp, table.schema)
        if not self.coordinates:
            return table
        per_row = [(r, len(rows)) for r, rows in zip(batch.records, batch.rows, strict=True)]
        return _with_coordinates(
            table,
            tp,
            [r.offset for r, n in per_row for _ in range(n)],
            [r.timestamp_ms for r, n in per_row for _ in range(n)],
            [r.key for r, n in per_row for _ in range(n)],
        )

    def _from_table(self, tp: TP, rows: TableRows) -> pa.Table:
        import pyarrow as pa

        table = rows.table
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        names = table.column_names
        if len(set(names)) < len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            first = of_message(*tp, rows.messages[0])
            raise ResultError(first, f"its batch's table has columns {twice} more than once")
        schema = self.schema(tp)
        if schema is not None:
            columns = []
            for f in schema:
                if f.name not in names:
                    columns.append(pa.nulls(table.num_rows, f.type))
                    continue
                column = table.column(f.name)
                try:
                    columns.append(column.cast(f.type))
                except (pa.ArrowException, *ARROW_ERRORS) as exc:
                    culprit = of_message(*tp, rows.messages[_first_bad_row(column, f.type)])
                    reason = f"field {f.name!r} does not fit the schema's {f.type}: {exc}"
                    raise ResultError(culprit, reason) from exc
            table = pa.Table.from_arrays(columns, schema=schema)
        self._keep(tp, table.schema)
        if not self.coordinates:
            return table
        messages = rows.messages
        stamps = [m.timestamp() for m in messages]
        return _with_coordinates(
            table,
            tp,
            [offset_of(m) for m in messages],
            [None if kind == TIMESTAMP_NOT_AVAILABLE else ts for kind, ts in stamps],
            [m.key() for m in messages],
        )

    def _keep(self, tp: TP, schema: pa.Schema) -> None:
        """A partition's first schema with no column of unknown type: later batches fit it."""
        import pyarrow as pa

        known = self.declared is not None or tp in self._inferred
        if not known and not any(pa.types.is_null(f.type) for f in schema):
            self._inferred[tp] = schema

    def _culprit(self, batch: Batch, schema: pa.Schema | None, exc: Exception) -> ResultError:
        """The first record whose rows do not convert, named in the error."""
        import pyarrow as pa

        for record, rows in zip(batch.records, batch.rows, strict=True):
            try:
                pa.Table.from_pylist(rows, schema=schema)
            except (pa.ArrowException, *ARROW_ERRORS) as one:
                return ResultError(record, f"does not fit the schema: {one}")
        return ResultError(batch.records[0], f"the batch does not convert to Arrow: {exc}")


def _first_record(batch: Batch) -> Record:
    if batch.records:
        return batch.records[0]
    return of_message(batch.topic, batch.partition, batch.tables[0].messages[0])


def _first_bad_row(column: Any, kind: Any) -> int:
    """The index of the first value of ``column`` that does not cast to ``kind`` (0 if each
    casts alone)."""
    import pyarrow as pa

    for index in range(len(column)):
        try:
            column.slice(index, 1).cast(kind)
        except (pa.ArrowException, *ARROW_ERRORS):
            return index
    return 0


def _with_coordinates(
    table: pa.Table,
    tp: TP,
    offsets: list[int],
    stamps: list[int | None],
    keys: list[bytes | None],
) -> pa.Table:
    import pyarrow as pa

    rows = len(offsets)
    return (
        table.append_column("kafka_topic", pa.array([tp[0]] * rows, pa.string()))
        .append_column("kafka_partition", pa.array([tp[1]] * rows, pa.int32()))
        .append_column("kafka_offset", pa.array(offsets, pa.int64()))
        .append_column("kafka_timestamp", pa.array(stamps, pa.timestamp("ms", tz="UTC")))
        .append_column("kafka_key", pa.array(keys, pa.binary()))
    )
