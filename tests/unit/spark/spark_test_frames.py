"""Helpers for the Spark query tests: string frames from dict rows, results as plain tuples."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StringType, StructField, StructType

from spark.queries import QueryResults


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
