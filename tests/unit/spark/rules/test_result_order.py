"""spark.rules.result_order: a query's rows, formatted, in an order that depends on the rows only,
streamed as Arrow in the frame's own order."""

from __future__ import annotations

from pyspark.sql import Row

from common.flights.result_csv import format_row
from spark.rules.result_order import arrow_tables, sorted_result_rows

Q4_ROWS = [("ATL-BOS", 0.0, 2.5), ("ATL-BOS", -0.0, 2.5), ("JFK-LAX", 1e16, None),
           ("JFK-LAX", 1e16, None), ("BOS-ATL", 123.0, 1e-05), (None, 0.1, 0.2)]


def _frame(spark, rows, partitions):
    frame = spark.createDataFrame([Row(route=r, avgFare=a, maxFare=m) for r, a, m in rows],
                                  "route string, avgFare double, maxFare double")
    return frame.repartition(partitions)


def test_the_rows_are_format_row_s_in_one_order_whatever_the_input_partitions(spark):
    orders = [list(sorted_result_rows("q4", _frame(spark, rows, partitions), 2_000_000))
              for rows, partitions in ((Q4_ROWS, 1), (Q4_ROWS[::-1], 3), (Q4_ROWS, 5))]
    assert orders[0] == orders[1] == orders[2]
    assert sorted(orders[0]) == sorted(tuple(format_row("q4", row)) for row in Q4_ROWS)
    assert len(orders[0]) == len(Q4_ROWS)  # equal rows are kept, 0.0 and -0.0 apart
    assert ("ATL-BOS", "-0.0", "2.5") in orders[0] and ("ATL-BOS", "0.0", "2.5") in orders[0]


def test_arrow_tables_keep_the_frames_order_across_partitions_and_batches(spark):
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "7")
    try:
        frame = spark.range(0, 100, 1, 4).selectExpr("id", "cast(id as double) / 4 as quarter") \
            .sortWithinPartitions("id")
        tables = list(arrow_tables(frame))
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert len(tables) > 4  # several batches per partition
    streamed = [(row["id"], row["quarter"]) for table in tables for row in table.to_pylist()]
    assert streamed == [(row["id"], row["quarter"]) for row in frame.collect()]


def test_an_empty_result_streams_nothing(spark):
    assert list(sorted_result_rows("q4", _frame(spark, Q4_ROWS, 2).limit(0), 10)) == []
