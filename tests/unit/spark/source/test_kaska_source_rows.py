"""Rows payloads -> the Arrow batches the `kaska` source hands to Spark (no broker)."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest

from common.flights.arrow_rows import MalformedRowsPayloadError, encode_rows, with_row_ids
from common.kaska.record_batch import NO_PRODUCER, BatchHeader
from spark.source.kaska_source import (
    BatchAssembler,
    RowsConverter,
    arrow_schema_of,
    client_id_of,
    output_schema,
    payload_columns,
)

CLIENT = uuid.UUID("00000000-0000-4000-8000-000000000001")


def payload(first_row_id: int, rows: int, columns=("legId", "totalFare", "other"),
            compression: str | None = "zstd") -> bytes:
    data = {name: [f"{name}-{first_row_id + i}" for i in range(rows)] for name in columns}
    batch = pa.RecordBatch.from_pydict(data, schema=pa.schema([(n, pa.string())
                                                               for n in columns]))
    return encode_rows(with_row_ids(batch, first_row_id), compression)


def header(producer_id: bytes = CLIENT.bytes, sequence: int = 3) -> BatchHeader:
    return BatchHeader(0, 0, 0, 0, 1, 0, 1, producer_id, sequence, 0)


def test_schema_is_the_columns_as_strings_then_the_three_ids():
    schema = output_schema(("legId", "totalFare"))
    assert schema.simpleString() == ("struct<legId:string,totalFare:string,client_id:string,"
                                     "message_id:bigint,row_id:bigint>")


def test_payload_columns_leave_out_the_row_id():
    assert payload_columns(payload(0, 2)) == ("legId", "totalFare", "other")


def test_converter_projects_and_adds_the_ids():
    columns = ("totalFare", "legId")
    converter = RowsConverter(columns)
    arrays = converter.arrays(payload(10, 3), str(CLIENT), 7)
    batch = pa.RecordBatch.from_arrays(arrays, schema=arrow_schema_of(output_schema(columns)))
    assert batch.to_pylist() == [
        {"totalFare": f"totalFare-{10 + i}", "legId": f"legId-{10 + i}",
         "client_id": str(CLIENT), "message_id": 7, "row_id": 10 + i} for i in range(3)]


def test_missing_columns_come_out_null_and_other_types_as_strings():
    batch = pa.RecordBatch.from_pydict({"legId": ["a", "b"], "totalFare": [1.5, 2.0]})
    arrays = RowsConverter(("legId", "totalFare", "absent")).arrays(
        encode_rows(with_row_ids(batch, 0), None), "c", 0)
    assert arrays[1].to_pylist() == ["1.5", "2"]
    assert arrays[2].to_pylist() == [None, None] and arrays[2].type == pa.string()


def test_uncompressed_payloads_decode_too():
    arrays = RowsConverter(("legId",)).arrays(payload(0, 2, compression=None), "c", 1)
    assert arrays[0].to_pylist() == ["legId-0", "legId-1"]


@pytest.mark.parametrize("bad", [b"", b"not arrow at all", payload(0, 2)[:40]])
def test_a_payload_that_is_not_arrow_is_a_named_error(bad):
    with pytest.raises(MalformedRowsPayloadError):
        RowsConverter(("legId",)).arrays(bad, "c", 0)


def test_a_payload_without_row_ids_is_refused():
    batch = pa.RecordBatch.from_pydict({"legId": ["a"], "row_id": [0]})
    without = pa.BufferOutputStream()
    with pa.ipc.new_stream(without, batch.drop_columns(["row_id"]).schema) as writer:
        writer.write_batch(batch.drop_columns(["row_id"]))
    with pytest.raises(MalformedRowsPayloadError):
        RowsConverter(("legId",)).arrays(without.getvalue().to_pybytes(), "c", 0)


def test_client_id_is_the_producer_id_or_the_topic_suffix():
    assert client_id_of(header(), "flights.x") == str(CLIENT)
    assert client_id_of(header(NO_PRODUCER), "flights.abc-1") == "abc-1"


def test_assembler_emits_batches_of_at_least_the_bound_and_flushes_the_rest():
    columns = ("legId",)
    schema = arrow_schema_of(output_schema(columns))
    converter = RowsConverter(columns)
    assembler = BatchAssembler(schema, rows_max=5)
    emitted = []
    for message_id in range(5):
        batch = assembler.add(converter.arrays(payload(message_id * 3, 3), "c", message_id))
        if batch is not None:
            emitted.append(batch)
    emitted.append(assembler.flush())
    assert assembler.flush() is None
    assert [b.num_rows for b in emitted] == [6, 6, 3]
    assert all(b.schema.equals(schema) for b in emitted)
    row_ids = [row["row_id"] for b in emitted for row in b.to_pylist()]
    assert row_ids == list(range(15))
    assert [row["message_id"] for row in emitted[2].to_pylist()] == [4, 4, 4]


def test_without_ids_the_schema_and_the_arrays_are_the_columns_alone():
    columns = ("totalFare", "legId")
    schema = output_schema(columns, include_ids=False)
    assert schema.simpleString() == "struct<totalFare:string,legId:string>"
    arrays = RowsConverter(columns, include_ids=False).arrays(payload(4, 2), str(CLIENT), 7)
    batch = pa.RecordBatch.from_arrays(arrays, schema=arrow_schema_of(schema))
    assert batch.to_pylist() == [{"totalFare": "totalFare-4", "legId": "legId-4"},
                                 {"totalFare": "totalFare-5", "legId": "legId-5"}]
