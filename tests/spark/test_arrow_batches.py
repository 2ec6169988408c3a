"""A batch handler's Arrow tables wait as slices of themselves and become one table with the
rows of handlers of one record: fitted to the schema, with the Kafka coordinates, and with the
record named when a table does not fit."""

from __future__ import annotations

import pyarrow as pa
import pytest
from confluent_kafka import Message

from kafleet.engine.handlers import TableRows, batch_results, first_result
from kafleet.engine.record import Record
from kafleet.errors import ResultError
from kafleet.spark.arrow_batches import ArrowBatches
from kafleet.spark.batcher import BatchBounds, PartitionResults

BIG = BatchBounds(max_records=1000, max_bytes=10**9, linger_s=60)


def msg(offset: int, key: bytes = b"k") -> Message:
    return Message(topic="orders", partition=0, offset=offset, key=key, value=b"v" * 10)


def table_of(*offsets: int) -> TableRows:
    return TableRows(pa.table({"n": list(offsets)}), [msg(o) for o in offsets])


def test_a_run_given_as_a_table_leaves_in_one_batch_as_that_very_table() -> None:
    part = PartitionResults("orders", 0)
    rows = table_of(0, 1, 2)

    assert part.add_table(rows, now=0) == (3, 33)  # key and value bytes, as a Record's
    batch = part.cut(3, BIG, now=0, urgent=True)

    assert batch is not None
    assert batch.tables == [rows]
    assert (len(batch), batch.row_count, batch.first_offset, batch.last_offset) == (3, 3, 0, 2)
    assert batch.size == 33


def test_a_table_cut_by_the_handled_mark_leaves_as_a_slice_and_the_rest_waits() -> None:
    part = PartitionResults("orders", 0)
    part.add_table(table_of(0, 1, 2, 3), now=0)

    first = part.cut(2, BIG, now=0, urgent=True)
    rest = part.cut(4, BIG, now=0, urgent=True)

    assert first is not None
    assert rest is not None
    assert first.tables[0].table.column("n").to_pylist() == [0, 1]
    assert rest.tables[0].table.column("n").to_pylist() == [2, 3]
    assert [m.offset() for m in rest.tables[0].messages] == [2, 3]


def test_tables_of_keys_finished_out_of_order_leave_in_offset_order_of_their_rows() -> None:
    part = PartitionResults("orders", 0)
    part.add_table(table_of(1, 3, 5), now=0)  # one key's run
    part.add_table(table_of(0, 2), now=0)  # another's, finished later

    batch = part.cut(4, BIG, now=0, urgent=True)

    assert batch is not None
    assert sorted(n for t in batch.tables for n in t.table.column("n").to_pylist()) == [0, 1, 2, 3]
    assert len(part) == 1  # offset 5 waits for the mark


def test_offsets_given_twice_are_taken_once() -> None:
    part = PartitionResults("orders", 0)
    part.add_table(table_of(0, 1), now=0)

    assert part.add_table(table_of(1, 2), now=0) == (1, 11)
    assert len(part) == 3


def test_rows_and_tables_of_one_batch_become_one_table_with_coordinates() -> None:
    part = PartitionResults("orders", 0)
    part.add(Record("orders", 0, 0, b"a", b"v", (), 1_700_000_000_000), [{"n": 0}], now=0)
    part.add_table(table_of(1, 2), now=0)
    batch = part.cut(3, BIG, now=0, urgent=True)
    assert batch is not None

    table = ArrowBatches(coordinates=True).convert(batch)

    assert table is not None
    assert sorted(table.column("kafka_offset").to_pylist()) == [0, 1, 2]
    assert table.column("kafka_topic").to_pylist() == ["orders"] * 3
    assert table.column(0).num_chunks == 1  # one chunk: one Spark partition, not one per run


def test_a_table_is_cast_to_the_declared_schema_and_missing_columns_are_null() -> None:
    arrow = ArrowBatches(coordinates=False)
    arrow.declared = pa.schema([("n", pa.int64()), ("note", pa.string())])
    part = PartitionResults("orders", 0)
    part.add_table(TableRows(pa.table({"n": pa.array([7], pa.int32())}), [msg(0)]), now=0)
    batch = part.cut(1, BIG, now=0, urgent=True)
    assert batch is not None

    table = arrow.convert(batch)

    assert table is not None
    assert table.schema == arrow.declared
    assert table.to_pylist() == [{"n": 7, "note": None}]


def test_a_table_that_does_not_fit_the_schema_names_the_record_and_the_field() -> None:
    arrow = ArrowBatches(coordinates=False)
    arrow.declared = pa.schema([("n", pa.int32())])
    part = PartitionResults("orders", 0)
    part.add_table(TableRows(pa.table({"n": [1, 2, 3_000_000_000]}), [msg(4), msg(5), msg(6)]), 0)
    batch = part.cut(7, BIG, now=0, urgent=True)
    assert batch is not None

    with pytest.raises(ResultError, match="field 'n' does not fit the schema's int32") as caught:
        arrow.convert(batch)
    assert caught.value.record.offset == 6


def test_tables_that_disagree_on_a_column_with_no_schema_yet_are_refused_by_name() -> None:
    part = PartitionResults("orders", 0)
    part.add_table(TableRows(pa.table({"id": [1], "note": [None]}), [msg(0)]), now=0)
    part.add_table(TableRows(pa.table({"id": ["one"], "note": ["x"]}), [msg(1)]), now=0)
    batch = part.cut(2, BIG, now=0, urgent=True)
    assert batch is not None

    with pytest.raises(ResultError, match="disagree on their columns") as caught:
        ArrowBatches(coordinates=False).convert(batch)
    assert caught.value.record.offset == 0


def test_a_table_with_a_column_twice_is_refused_by_name() -> None:
    twice = pa.Table.from_arrays([pa.array([1]), pa.array([2])], names=["n", "n"])
    part = PartitionResults("orders", 0)
    part.add_table(TableRows(twice, [msg(3)]), now=0)
    batch = part.cut(4, BIG, now=0, urgent=True)
    assert batch is not None

    with pytest.raises(ResultError, match=r"columns \['n'\] more than once"):
        ArrowBatches(coordinates=True).convert(batch)


def test_a_handler_that_reordered_its_messages_still_gives_the_batch_its_true_range() -> None:
    part = PartitionResults("orders", 0)
    messages = [msg(2), msg(0), msg(1)]  # sorted by key in place, say
    part.add_table(TableRows(pa.table({"n": [2, 0, 1]}), messages), now=0)
    batch = part.cut(3, BIG, now=0, urgent=True)
    assert batch is not None

    assert (batch.first_offset, batch.last_offset) == (0, 2)
    table = ArrowBatches(coordinates=True).convert(batch)
    assert table is not None
    assert table.column("kafka_offset").to_pylist() == table.column("n").to_pylist()


@pytest.mark.parametrize(
    ("columns", "problem"),
    [({"kafka_offset": [1]}, "coordinates"), ({"other": [1]}, "not in the schema")],
)
def test_a_tables_columns_are_checked_as_it_arrives(
    columns: dict[str, list[int]], problem: str
) -> None:
    arrow = ArrowBatches(coordinates=True)
    arrow.declared = pa.schema([("n", pa.int64())])

    with pytest.raises(ResultError, match=problem):
        arrow.check_table(("orders", 0), TableRows(pa.table(columns), [msg(9)]))


def test_a_batch_handlers_table_must_have_a_row_per_message() -> None:
    with pytest.raises(TypeError, match="a table of 1 rows for 2 messages"):
        batch_results(pa.table({"n": [1]}), 2)


def test_a_batch_of_one_gets_its_tables_row_as_a_dict() -> None:
    assert first_result(batch_results(pa.table({"n": [1]}), 1)) == {"n": 1}
