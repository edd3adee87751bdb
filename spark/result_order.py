"""A query's result rows in an order every run repeats, streamed to the driver a partition at
a time: what a session job writes, and what the service's warm-up runs so that a first
session finds its plan's generated code compiled (spark/warm_up.py).

The rows are hash-partitioned by all their columns into a number of partitions fixed by the
session's size (one per `INPUT_ROWS_PER_RESULT_RANGE` input rows), and sorted by all their
columns inside each: the same rows give the same partitions in the same order
(`toLocalIterator`: the driver holds one partition, about that share of the session, never a
whole result). Not a global sort: its range partitioning samples the frame first, which
computed Q2's plan twice (measured: Q2 8-10 s of a 2M-row session).

The rows travel as Arrow, not as pickled Rows: in the executors `mapInArrow` turns each Arrow
batch of a partition (in order) into one row holding that batch as an IPC stream, and the
driver formats the batches' columns (`spark.result_columns`). For Q2's 114k rows of a 2M-row
session the Rows and their per-value formatting took ~1 s of the driver.

Pure planning; thread-safe as Spark's DataFrame API is.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.ipc as ipc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark.result_columns import format_table

# A range per this many input rows keeps Q2's (~6 % of the rows) at ~60k rows however large
# the session.
INPUT_ROWS_PER_RESULT_RANGE = 1_000_000
IPC_COLUMN = "ipc"


def sorted_result_rows(query: str, frame: DataFrame, input_rows: int
                       ) -> Iterator[tuple[str, ...]]:
    """The query's formatted rows (as common.result_csv.format_row formats them), in the order
    above."""
    # -0.0 sorts equal to 0.0 but prints apart: each double's text breaks such ties.
    texts = [F.col(name).cast("string") for name, kind in frame.dtypes if kind == "double"]
    partitions = max(1, -(-input_rows // INPUT_ROWS_PER_RESULT_RANGE))
    ordered = frame.repartition(partitions, *frame.columns, *texts) \
        .sortWithinPartitions(*frame.columns, *texts)
    for table in arrow_tables(ordered):
        yield from format_table(query, table)


def arrow_tables(frame: DataFrame) -> Iterator[pa.Table]:
    """The frame's rows as Arrow tables, in the frame's order (partition after partition, each
    in its own order), the driver holding about one partition at a time."""
    batches = frame.mapInArrow(ipc_streams, f"{IPC_COLUMN} binary")
    for row in batches.toLocalIterator(prefetchPartitions=True):
        with ipc.open_stream(row[IPC_COLUMN]) as reader:
            yield reader.read_all()


def ipc_streams(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Each batch (an executor's, in its partition's order) as one row: its IPC stream."""
    for batch in batches:
        sink = pa.BufferOutputStream()
        with ipc.new_stream(sink, batch.schema) as writer:
            writer.write_batch(batch)
        yield pa.record_batch([pa.array([sink.getvalue().to_pybytes()], pa.binary())],
                              names=[IPC_COLUMN])
