"""Spark readers for the two input files, producing the frames `spark.queries` expects.

Both frames hold every CSV column as a string column named by its header (QUERIES.md "Inputs"):
- flights: the Kaggle `itineraries.csv` layout, `,`-separated, RFC-4180 quoting (a field may be
  quoted, a quote inside a quoted field is doubled), one record per line;
- airports: the "Airports Opendatahub" layout, `;`-separated, UTF-8 with a byte-order mark,
  `\\N` for null.

Spark's CSV reader leaves an empty field as null; the queries treat null and "" alike.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

BYTE_ORDER_MARK = "\ufeff"

# RFC-4180: `"` quotes a field and a doubled `"` inside it is one quote. multiLine stays off: the
# real files never break a record over lines, and line splitting lets Spark read one file with
# several tasks.
_RFC4180_OPTIONS = {
    "header": "true",
    "inferSchema": "false",
    "quote": '"',
    "escape": '"',
    "multiLine": "false",
    "mode": "PERMISSIVE",
    "encoding": "UTF-8",
}


def read_flights_csv(spark: SparkSession, path: str) -> DataFrame:
    """The flights file as string columns named by its header."""
    frame = spark.read.options(**_RFC4180_OPTIONS).option("sep", ",").csv(path)
    return strip_byte_order_mark(frame)


def read_airports_csv(spark: SparkSession, path: str) -> DataFrame:
    """The airports file as string columns named by its header; `\\N` fields are null."""
    frame = (
        spark.read.options(**_RFC4180_OPTIONS)
        .option("sep", ";")
        .option("nullValue", "\\N")
        .csv(path)
    )
    return strip_byte_order_mark(frame)


def strip_byte_order_mark(frame: DataFrame) -> DataFrame:
    """Renames the first column when a byte-order mark survived into its header name."""
    if not frame.columns:
        return frame
    first = frame.columns[0]
    if not first.startswith(BYTE_ORDER_MARK):
        return frame
    return frame.withColumnRenamed(first, first.removeprefix(BYTE_ORDER_MARK))
