"""Rows payload: Arrow IPC round trip, row ids, and refusal of what is not one."""

import pyarrow as pa
import pytest

from common.flights.arrow_rows import (
    BUFFERS_BYTES_MIN,
    DECODED_BYTES_MAX_DEFAULT,
    FRAME_MAGIC,
    MalformedRowsPayloadError,
    RowsPayloadTooLargeError,
    decode_rows,
    encode_rows,
    open_rows,
    read_all,
    read_rows,
    whole_array,
    with_row_ids,
)


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


def _stream_without_row_ids() -> bytes:
    sink = pa.BufferOutputStream()
    batch = pa.RecordBatch.from_pydict({"legId": ["a"]})
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def test_payload_without_row_ids_is_refused():
    with pytest.raises(MalformedRowsPayloadError, match="row_id"):
        decode_rows(_stream_without_row_ids())


@pytest.mark.parametrize("compression", ["zstd", "lz4"])
def test_the_whole_stream_is_one_frame_of_the_codec(compression):
    payload = encode_rows(_rows(), compression=compression)
    assert FRAME_MAGIC[payload[:4]] == compression


def test_payloads_of_earlier_clients_with_compressed_buffers_still_decode():
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.ipc.new_stream(sink, _rows().schema, options=options) as writer:
        writer.write_batch(_rows())
    table = decode_rows(sink.getvalue().to_pybytes())
    assert table.column("row_id").to_pylist() == [600, 601, 602]


@pytest.mark.parametrize("compression", ["zstd", "lz4"])
@pytest.mark.parametrize("cut", ["header", "half", "last_byte"])
def test_torn_or_corrupt_frames_are_a_named_error(compression, cut):
    whole = encode_rows(_rows(), compression=compression)
    torn = {"header": whole[:4], "half": whole[: len(whole) // 2], "last_byte": whole[:-1]}[cut]
    try:
        table = decode_rows(torn)
    except MalformedRowsPayloadError:
        table = None
    # Never a part of the rows: an error, or (LZ4 cut inside its end mark only) all of them.
    assert table is None or table.equals(decode_rows(whole))
    assert table is None or cut == "last_byte"
    corrupt = bytearray(whole)
    corrupt[len(corrupt) // 2] ^= 0xFF
    corrupt[len(corrupt) // 2 + 1] ^= 0xFF
    try:
        table = decode_rows(bytes(corrupt))
    except MalformedRowsPayloadError:
        return  # the usual outcome
    # A flipped byte inside string data may still decode: then it is data, with row ids intact.
    assert table.num_rows == 3


@pytest.mark.parametrize("codec", ["zstd", "lz4"])
def test_a_frame_that_inflates_past_the_bound_is_refused_before_it_is_decoded(codec):
    # 96 MiB of zeros squeezed into a frame of a few KB: a decompression bomb.
    bomb = pa.Codec(codec).compress(b"\0" * (96 << 20), asbytes=True)
    assert len(bomb) < 1 << 20
    with pytest.raises(RowsPayloadTooLargeError) as info:
        decode_rows(bomb)
    assert info.value.decoded_bytes_max == DECODED_BYTES_MAX_DEFAULT


def test_the_bound_is_the_callers():
    payload = encode_rows(_rows(), compression="lz4")
    decoded = len(encode_rows(_rows(), compression=None))
    assert read_all(open_rows(payload, decoded_bytes_max=decoded)).num_rows == 3
    with pytest.raises(RowsPayloadTooLargeError):
        open_rows(payload, decoded_bytes_max=decoded - 1)


def _wide_rows(rows: int):
    names = ["legId", "totalFare", "segmentsAirlineName", "baseFare"]
    batch = pa.RecordBatch.from_pydict(
        {name: [f"{name}-{i}-xxxxxxxxxxxxxxxxxxxx" for i in range(rows)] for name in names})
    return with_row_ids(batch, first_row_id=0)


def test_a_large_slice_compresses_its_buffers_and_a_small_one_the_whole_stream():
    large, small = _wide_rows(5000), _wide_rows(10)
    assert large.nbytes >= BUFFERS_BYTES_MIN > small.nbytes
    assert encode_rows(large, "lz4")[:4] == b"\xff\xff\xff\xff"  # a plain IPC stream
    assert FRAME_MAGIC[encode_rows(small, "lz4")[:4]] == "lz4"
    assert decode_rows(encode_rows(large, "lz4")).equals(pa.Table.from_batches([large]))


@pytest.mark.parametrize("rows", [10, 5000])
@pytest.mark.parametrize("compression", ["lz4", "zstd", None])
def test_read_rows_returns_only_the_columns_asked_for_and_the_row_ids(rows, compression):
    payload = encode_rows(_wide_rows(rows), compression)
    table = read_rows(payload, ["totalFare", "legId", "absent"])
    assert table.schema.names == ["legId", "totalFare", "row_id"]  # the payload's order
    assert table.column("totalFare").to_pylist()[-1] == f"totalFare-{rows - 1}-" + "x" * 20
    assert table.column("row_id").to_pylist() == list(range(rows))


def test_read_rows_refuses_a_payload_without_row_ids_even_when_other_columns_are_asked():
    with pytest.raises(MalformedRowsPayloadError, match="row_id"):
        read_rows(_stream_without_row_ids(), ["legId"])


def test_a_torn_large_slice_is_a_named_error():
    whole = encode_rows(_wide_rows(5000), "lz4")
    for cut in (whole[:8], whole[: len(whole) // 2], whole[:-1]):
        with pytest.raises(MalformedRowsPayloadError):
            read_rows(cut, ["legId"])


def test_whole_array_combines_chunks_and_keeps_an_array():
    chunked = pa.chunked_array([["a"], [], [None, "b"]])
    combined = whole_array(chunked)
    assert isinstance(combined, pa.Array) and combined.to_pylist() == ["a", None, "b"]
    array = pa.array([1, 2])
    assert whole_array(array) is array
