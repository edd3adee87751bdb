"""A query's result rows in an order every run repeats, streamed to the driver a partition at
a time: what a session job writes, and what the service's warm-up runs so that a first
session finds its plan's generated code compiled (spark/warm_up.py).

The rows are hash-partitioned by all their columns into a number of partitions fixed by the
session's size (one per `INPUT_ROWS_PER_RESULT_RANGE` input rows), and sorted by all their
columns inside each: the same rows give the same partitions in the same order
(`toLocalIterator`: the driver holds one partition, about that share of the session, never a
whole result). Not a global sort: its range partitioning samples the frame first, which
computed Q2's plan twice (measured: Q2 8-10 s of a 2M-row session).

Pure planning; thread-safe as Spark's DataFrame API is.
"""

from __future__ import annotations

from collections.abc import Iterator

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from common.result_csv import format_row

# A range per this many input rows keeps Q2's (~6 % of the rows) at ~60k rows however large
# the session.
INPUT_ROWS_PER_RESULT_RANGE = 1_000_000


def sorted_result_rows(query: str, frame: DataFrame, input_rows: int) -> Iterator[list[str]]:
    """The query's formatted rows (common.result_csv.format_row), in the order above."""
    # -0.0 sorts equal to 0.0 but prints apart: each double's text breaks such ties.
    texts = [F.col(name).cast("string") for name, kind in frame.dtypes if kind == "double"]
    partitions = max(1, -(-input_rows // INPUT_ROWS_PER_RESULT_RANGE))
    ordered = frame.repartition(partitions, *frame.columns, *texts) \
        .sortWithinPartitions(*frame.columns, *texts)
    for row in ordered.toLocalIterator(prefetchPartitions=True):
        yield format_row(query, row)
