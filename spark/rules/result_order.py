"""A query's result rows in an order every run repeats, streamed to the driver a partition at
a time: what a session job writes, and what the service's warm-up runs so that a first
session finds its plan's generated code compiled (spark/service/warm_up.py).

The rows are hash-partitioned by all their columns into a number of partitions fixed by the
session's size (one per `INPUT_ROWS_PER_RESULT_RANGE` input rows), and sorted by all their
columns inside each: the same rows give the same partitions in the same order
(`toLocalIterator`: the driver holds one partition, about that share of the session, never a
whole result). Not a global sort: its range partitioning samples the frame first, which
computed Q2's plan twice (measured: Q2 8-10 s of a 2M-row session).

The rows travel as Arrow, not as pickled Rows: the JVM turns each partition into Arrow record
batches itself (`toArrowBatchRdd`, what `toArrow` runs), the driver fetches them a partition at
a time (`PythonRDD.toLocalIteratorAndServe`, what `toLocalIterator` runs) and formats their
columns (`spark.rules.result_columns`). For Q2's 114k rows of a 2M-row session, pickled Rows and
their per-value formatting took 1.0-1.6 s and 1.4-2.7 CPU-s (JVM and driver), the Arrow batches
0.2-0.44 s and 0.37-0.8 CPU-s (measured side by side, docs/benchmarks.md "Ledger"). These
are PySpark's own internal entry points (no public API streams Arrow a partition at a time);
the pinned pyspark version and the tests hold them.

Pure planning; thread-safe as Spark's DataFrame API is.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.ipc as ipc
from pyspark.serializers import NoOpSerializer
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.util import _local_iterator_from_socket

from spark.rules.result_columns import format_table

# A range per this many input rows keeps Q2's (~6 % of the rows) at ~60k rows however large
# the session.
INPUT_ROWS_PER_RESULT_RANGE = 1_000_000
LARGE_VAR_TYPES_CONF = "spark.sql.execution.arrow.useLargeVarTypes"
CALL_SITE = f"arrow_tables at {__file__}"


def sorted_result_rows(query: str, frame: DataFrame, input_rows: int
                       ) -> Iterator[tuple[str, ...]]:
    """The query's formatted rows (as common.flights.result_csv.format_row formats them), in the
    order above."""
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
    spark = frame.sparkSession
    large_types = spark.conf.get(LARGE_VAR_TYPES_CONF, "false") == "true"
    schema = to_arrow_schema(frame.schema, error_on_duplicated_field_names_in_struct=True,
                             timezone="UTC", prefers_large_types=large_types)
    context = spark.sparkContext
    # The jobs start later, in the thread serving the batches, which inherits the call site
    # that names them (Spark's UI, bench_pipeline's stage table) from this one.
    context._jsc.setCallSite(CALL_SITE)
    try:
        batches = frame._jdf.toArrowBatchRdd()
        served = context._jvm.PythonRDD.toLocalIteratorAndServe(batches, True)
    finally:
        context._jsc.setCallSite(None)
    for message in _local_iterator_from_socket(served, NoOpSerializer()):
        yield pa.Table.from_batches([ipc.read_record_batch(pa.py_buffer(message), schema)])
