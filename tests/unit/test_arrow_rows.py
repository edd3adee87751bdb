"""Rows payload: Arrow IPC round trip, row ids, and refusal of what is not one."""

import pyarrow as pa
import pytest

from common.arrow_rows import (
    DECODED_BYTES_MAX_DEFAULT,
    FRAME_MAGIC,
    MalformedRowsPayloadError,
    RowsPayloadTooLargeError,
    decode_rows,
    encode_rows,
    open_rows,
    read_all,
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


def test_payload_without_row_ids_is_refused():
    sink = pa.BufferOutputStream()
    batch = pa.RecordBatch.from_pydict({"legId": ["a"]})
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    with pytest.raises(MalformedRowsPayloadError, match="row_id"):
        decode_rows(sink.getvalue().to_pybytes())


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
