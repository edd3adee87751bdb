"""Helpers for the Spark query tests: string frames from dict rows, results as plain tuples."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StringType, StructField, StructType

from spark.rules.query_frames import QueryResults


def string_frame(
    spark: SparkSession,
    rows: Sequence[Mapping[str, str | None]],
    columns: Iterable[str] = (),
) -> DataFrame:
    """Every key of every row (plus `columns`) as a string column; a missing key is null."""
    names = list(dict.fromkeys([*columns, *(name for row in rows for name in row)]))
    schema = StructType([StructField(name, StringType()) for name in names])
    return spark.createDataFrame([tuple(row.get(name) for name in names) for row in rows], schema)


def collected(results: QueryResults) -> dict[str, list[tuple]]:
    return {query: [tuple(row) for row in frame.collect()] for query, frame in
            results.frames().items()}


def derived_frame(spark: SparkSession, flights: DataFrame, airports: DataFrame) -> DataFrame:
    """`flights` (string columns) with its query fields derived as the `kaska` source's
    `arrowTransform` derives them in the session job (spark/rules/flight_fields.py), given the
    airports as the job collects them."""
    import pyarrow as pa

    from spark.rules.contract import FLIGHT_COLUMNS
    from spark.rules.derived_queries import airport_coordinates
    from spark.rules.flight_fields import derive

    table = flights.toArrow()
    strings = pa.table({name: table[name].cast(pa.string()) if name in table.column_names
                        else pa.nulls(table.num_rows, pa.string()) for name in FLIGHT_COLUMNS})
    return spark.createDataFrame(derive(strings, airport_coordinates(airports).to_json()))


def compute(path: str, spark: SparkSession, flights: DataFrame, airports: DataFrame
            ) -> QueryResults:
    """Q1-Q4 the way `path` computes them: "spark" parses the strings in Spark
    (`compute_all`, the CSV path), "derived" as a session job does (`compute_all_derived`)."""
    from scripts.bench.spark_csv import compute_all
    from spark.rules.derived_queries import compute_all_derived
    from spark.rules.query_frames import strip_byte_order_mark

    if path == "derived":
        return compute_all_derived(derived_frame(spark, strip_byte_order_mark(flights),
                                                 airports))
    return compute_all(flights, airports)
