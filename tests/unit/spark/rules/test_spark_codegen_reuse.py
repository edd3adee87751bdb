"""The queries' generated Java must not depend on a session's data, so that Spark's code cache
serves the next session's plans instead of compiling them again (Janino, then the JIT).
spark/rules/query_frames.py: Q4's threshold (`rows_above_mean`) and SESSION_CONFIG."""

from __future__ import annotations

from pyspark.sql import functions as F

from spark.rules.query_frames import fares_by_route, rows_above_mean, valid_rows
from tests.unit.spark.rules.spark_test_frames import string_frame


def generated_java(frame) -> list[str]:
    """The Java of every whole-stage-codegen subtree of the frame's physical plan, once run
    (adaptive execution settles the plan only then)."""
    frame.collect()
    subtrees = frame._jdf.queryExecution().debug().codegenToSeq()
    return [subtrees.apply(i)._2() for i in range(subtrees.size())]


def prepared_rows(spark):
    """The columns q4 reads from the prepared frame (valid rows: no invalid kind)."""
    frame = string_frame(spark, [{"route": "ATL-BOS", "fare": "100.5"},
                                 {"route": "ATL-BOS", "fare": "300.25"},
                                 {"route": "JFK-LAX", "fare": "80.0"}])
    return frame.select("route", F.col("fare").cast("double").alias("totalFare"),
                        F.lit(None).cast("string").alias("invalid_kind"))


def q4(prepared, mean_fare: float):
    """Q4 as both paths build it: the valid rows above the mean, grouped by route."""
    return fares_by_route(rows_above_mean(valid_rows(prepared), mean_fare), "route")


def test_q4_code_is_the_same_whatever_the_mean_fare(spark):
    prepared = prepared_rows(spark)
    low, high = q4(prepared, 90.125), q4(prepared, 250.0625)
    java_low, java_high = generated_java(low), generated_java(high)
    assert java_low, "the plan has whole-stage-codegen stages"
    assert java_low == java_high
    assert not any("90.125" in java or "250.0625" in java for java in java_low + java_high)
    # ... and the threshold still decides which rows count.
    assert sorted(low.collect()) == [("ATL-BOS", 200.375, 300.25)]
    assert sorted(high.collect()) == [("ATL-BOS", 300.25, 300.25)]


def test_a_literal_threshold_would_be_written_into_the_code(spark):
    """What the test above guards against: Spark inlines a literal into the Java."""
    prepared = prepared_rows(spark)
    java = generated_java(prepared.where(F.col("totalFare") > F.lit(90.125)))
    assert any("90.125" in text for text in java)
