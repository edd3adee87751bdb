"""The payload of a data record: a slice of CSV rows as one Arrow IPC stream.

A client reads its CSV files with a streaming reader into Arrow record batches whose columns
are every CSV column, as strings, named by the header, plus `row_id` (int64, the row's
0-based number in its file). Each slice travels as one Kaska record holding an Arrow IPC
stream (schema + one record batch), either as it is or compressed as a whole into one LZ4 or
Zstandard frame (`compression`). Why Arrow: the Spark `kaska` source hands Arrow record
batches to Spark as they are, with no per-row Python work, and the client sends complete rows
(projection is Spark's job) at a few bytes per field.

Two compressed forms, chosen by the slice's size: a small slice (the 300-row slices of old
clients, under `BUFFERS_BYTES_MIN` decoded) travels as the whole stream in one frame, because
its ~60 small buffers compressed one by one cost 2.3x the CPU of one frame (measured on 2M
generated rows: 1.32 vs 0.57 ms per slice with zstd); a large one (the client's ~1 MiB slices)
travels with Arrow's own per-buffer compression, which costs the same there (0.14 s per 200k
rows either way, LZ4) and lets a reader decompress only the columns it reads (`read_rows`
with `columns`: 7 of 28 columns in 0.02 s per 200k rows instead of 0.05). Readers tell the
forms apart by their first four bytes (an IPC stream starts with the continuation marker
0xFFFFFFFF, a frame with its codec's magic number).

Pure functions; thread-safe.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

ROW_ID = "row_id"
# LZ4: about as cheap to write as Zstandard at level 1 and 3-4x cheaper to read, for 1.4x the
# bytes; all on one machine, the brokers' and Spark's CPU matter as much as the client's.
COMPRESSION_DEFAULT = "lz4"
COMPRESSIONS = (None, "lz4", "zstd")
# The first four bytes of each codec's frame (LZ4 frame format; Zstandard frame format).
FRAME_MAGIC = {b"\x04\x22\x4d\x18": "lz4", b"\x28\xb5\x2f\xfd": "zstd"}
# Level 1: Zstandard's fastest; the payloads are short-lived (until the session is deleted).
_CODECS = {"lz4": pa.Codec("lz4"), "zstd": pa.Codec("zstd", compression_level=1)}
_BUFFER_OPTIONS = {name: ipc.IpcWriteOptions(compression=codec)
                   for name, codec in _CODECS.items()}
# Decoded bytes from which a slice's buffers are compressed one by one (module doc).
BUFFERS_BYTES_MIN = 256 * 1024


# What one payload may decode to. A client's slice is ~0.1-1 MB decoded; a frame that inflates
# past this is hostile (LZ4 reaches ~250x, Zstandard far more), and is refused before the
# memory of a Spark Python worker is.
DECODED_BYTES_MAX_DEFAULT = 64 * 1024 * 1024


class MalformedRowsPayloadError(ValueError):
    """A record that is not an Arrow IPC stream of one or more record batches."""


class RowsPayloadTooLargeError(MalformedRowsPayloadError):
    """A compressed payload that decodes to more than its bound (`decoded_bytes_max`)."""

    decoded_bytes_max: int

    def __init__(self, decoded_bytes_max: int) -> None:
        super().__init__(f"rows payload decodes to more than {decoded_bytes_max} bytes")
        self.decoded_bytes_max = decoded_bytes_max


def encode_rows(batch: pa.RecordBatch, compression: str | None = COMPRESSION_DEFAULT,
                buffers_bytes_min: int = BUFFERS_BYTES_MIN) -> bytes:
    """One Arrow IPC stream holding `batch` (which already carries its `row_id` column),
    uncompressed when `compression` is None, else compressed per buffer when the batch holds
    at least `buffers_bytes_min` bytes and as one frame when it holds fewer."""
    assert ROW_ID in batch.schema.names, "rows travel with their row ids"
    assert compression in COMPRESSIONS, compression
    per_buffer = compression is not None and batch.nbytes >= buffers_bytes_min
    sink = pa.BufferOutputStream()
    options = _BUFFER_OPTIONS[compression] if per_buffer else None
    with ipc.new_stream(sink, batch.schema, options=options) as writer:
        writer.write_batch(batch)
    if compression is None or per_buffer:
        return sink.getvalue().to_pybytes()
    # One-shot compression of the whole stream into one frame: 30 % less CPU than streaming
    # the writer through a CompressedOutputStream (LZ4, 300-row slices), same bytes.
    return _CODECS[compression].compress(sink.getvalue(), asbytes=True)


def open_rows(payload: bytes | memoryview, options: ipc.IpcReadOptions | None = None,
              decoded_bytes_max: int = DECODED_BYTES_MAX_DEFAULT
              ) -> ipc.RecordBatchStreamReader:
    """An IPC stream reader over one payload, whichever form it has; raises
    MalformedRowsPayloadError when it is no stream, RowsPayloadTooLargeError when a frame
    decodes to more than `decoded_bytes_max` (a plain stream is bounded by its own size)."""
    return _open_stream(_stream_bytes(payload, decoded_bytes_max), options)


def _stream_bytes(payload: bytes | memoryview, decoded_bytes_max: int) -> pa.Buffer:
    """The IPC stream of a payload: the payload itself, or its frame decoded."""
    codec = FRAME_MAGIC.get(bytes(payload[:4]))
    if codec is None:
        return pa.py_buffer(payload)
    try:
        # Decoded whole, at most one byte past the bound: never more memory than that.
        decoded = pa.CompressedInputStream(pa.BufferReader(pa.py_buffer(payload)), codec) \
            .read_buffer(decoded_bytes_max + 1)
    except (pa.ArrowInvalid, pa.ArrowIOError) as err:
        raise MalformedRowsPayloadError(f"not an Arrow IPC rows payload: {err}") from err
    if decoded.size > decoded_bytes_max:
        raise RowsPayloadTooLargeError(decoded_bytes_max)
    return decoded


def _open_stream(stream: pa.Buffer, options: ipc.IpcReadOptions | None
                 ) -> ipc.RecordBatchStreamReader:
    try:
        return ipc.open_stream(pa.BufferReader(stream), options=options)
    except (pa.ArrowInvalid, pa.ArrowIOError) as err:
        raise MalformedRowsPayloadError(f"not an Arrow IPC rows payload: {err}") from err


def read_rows(payload: bytes | memoryview, columns: Collection[str] | None = None,
              decoded_bytes_max: int = DECODED_BYTES_MAX_DEFAULT) -> pa.Table:
    """The rows of one payload: every column, or only those of `columns` it holds plus
    `row_id`, in the payload's order; with compressed buffers only those are decompressed.
    Raises MalformedRowsPayloadError (also without a `row_id` column) or
    RowsPayloadTooLargeError."""
    stream = _stream_bytes(payload, decoded_bytes_max)
    options = None
    if columns is not None:
        with _open_stream(stream, None) as reader:
            names = reader.schema.names
        wanted = set(columns) | {ROW_ID}
        options = ipc.IpcReadOptions(
            included_fields=[i for i, name in enumerate(names) if name in wanted])
    table = read_all(_open_stream(stream, options))
    if ROW_ID not in table.schema.names:
        raise MalformedRowsPayloadError("rows payload without a row_id column")
    return table


def read_all(reader: ipc.RecordBatchStreamReader) -> pa.Table:
    """Every batch of an open payload stream; a torn or corrupt one raises
    MalformedRowsPayloadError."""
    try:
        with reader:
            return reader.read_all()
    except (pa.ArrowInvalid, pa.ArrowIOError) as err:
        raise MalformedRowsPayloadError(f"not an Arrow IPC rows payload: {err}") from err


def decode_rows(payload: bytes | memoryview) -> pa.Table:
    """The rows of one record; raises MalformedRowsPayloadError for anything else."""
    return read_rows(payload)


def with_row_ids(batch: pa.RecordBatch, first_row_id: int) -> pa.RecordBatch:
    """`batch` plus a `row_id` column numbering its rows from `first_row_id`."""
    row_ids = pa.array(np.arange(first_row_id, first_row_id + batch.num_rows, dtype=np.int64))
    return batch.append_column(ROW_ID, row_ids)


def whole_array(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """`values` as one array: a chunked array's chunks combined, an array as it is."""
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
