"""Rows payload: Arrow IPC round trip, row ids, and refusal of what is not one."""

import pyarrow as pa
import pytest

from common.arrow_rows import MalformedRowsPayloadError, decode_rows, encode_rows, with_row_ids


def _rows():
    batch = pa.RecordBatch.from_pydict({
        "legId": ["a", "a", ""],
        "segmentsAirlineName": ["Delta, Inc||United", None, "x"],
    })
    return with_row_ids(batch, first_row_id=600)


@pytest.mark.parametrize("compression", ["zstd", "lz4", None])
def test_round_trip_keeps_rows_nulls_and_row_ids(compression):
    table = decode_rows(encode_rows(_rows(), compression=compression))
    assert table.column("legId").to_pylist() == ["a", "a", ""]
    assert table.column("segmentsAirlineName").to_pylist() == ["Delta, Inc||United", None, "x"]
    assert table.column("row_id").to_pylist() == [600, 601, 602]


def test_compression_shrinks_repetitive_rows():
    batch = with_row_ids(pa.RecordBatch.from_pydict({"c": ["ATL-BOS-PT2H29M"] * 300}), 0)
    assert len(encode_rows(batch, "zstd")) < len(encode_rows(batch, None)) / 3


@pytest.mark.parametrize("payload", [b"", b"garbage" * 10, b"\xff\xff\xff\xff\x08\x00\x00\x00"])
def test_garbage_is_a_named_error(payload):
    with pytest.raises(MalformedRowsPayloadError):
        decode_rows(payload)


def test_truncated_payload_is_a_named_error():
    whole = encode_rows(_rows())
    with pytest.raises(MalformedRowsPayloadError):
        decode_rows(whole[: len(whole) // 2])


def test_payload_without_row_ids_is_refused():
    sink = pa.BufferOutputStream()
    batch = pa.RecordBatch.from_pydict({"legId": ["a"]})
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    with pytest.raises(MalformedRowsPayloadError, match="row_id"):
        decode_rows(sink.getvalue().to_pybytes())
