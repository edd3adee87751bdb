"""The payload of a data record: a slice of CSV rows as one Arrow IPC stream.

A client reads its CSV files with a streaming reader into Arrow record batches whose columns
are every CSV column, as strings, named by the header, plus `row_id` (int64, the row's
0-based number in its file). Each slice travels as one Kaska record holding an Arrow IPC
stream (schema + one record batch) with ZSTD buffer compression. Why Arrow: the Spark `kaska`
source hands Arrow record batches to Spark as they are, with no per-row Python work, and the
client sends complete rows (projection is Spark's job) at a few bytes per field.

Pure functions; thread-safe.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.ipc as ipc

ROW_ID = "row_id"
COMPRESSION = "zstd"


class MalformedRowsPayloadError(ValueError):
    """A record that is not an Arrow IPC stream of one or more record batches."""


def encode_rows(batch: pa.RecordBatch, compression: str | None = COMPRESSION) -> bytes:
    """One Arrow IPC stream holding `batch` (which already carries its `row_id` column)."""
    assert ROW_ID in batch.schema.names, "rows travel with their row ids"
    sink = pa.BufferOutputStream()
    options = ipc.IpcWriteOptions(compression=compression)
    with ipc.new_stream(sink, batch.schema, options=options) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def decode_rows(payload: bytes | memoryview) -> pa.Table:
    """The rows of one record; raises MalformedRowsPayloadError for anything else."""
    try:
        with ipc.open_stream(pa.py_buffer(payload)) as reader:
            table = reader.read_all()
    except (pa.ArrowInvalid, pa.ArrowIOError) as err:
        raise MalformedRowsPayloadError(f"not an Arrow IPC rows payload: {err}") from err
    if ROW_ID not in table.schema.names:
        raise MalformedRowsPayloadError("rows payload without a row_id column")
    return table


def with_row_ids(batch: pa.RecordBatch, first_row_id: int) -> pa.RecordBatch:
    """`batch` plus a `row_id` column numbering its rows from `first_row_id`."""
    row_ids = pa.array(range(first_row_id, first_row_id + batch.num_rows), type=pa.int64())
    return batch.append_column(ROW_ID, row_ids)
