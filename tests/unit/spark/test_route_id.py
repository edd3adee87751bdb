"""spark/route_id.py: a route's id and its text, in the workers (numpy) and in Spark."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from pyspark.sql import functions as F

from spark.route_id import (
    AIRPORT_CODES,
    airport_code_number,
    airport_code_numbers,
    route_of,
    route_text,
)

ROUTES = ["AAA-AAA", "ATL-BOS", "BOS-ATL", "ZZZ-ZZZ", "JFK-LAX", "ZZA-AZZ"]


def _id(route: str) -> int:
    origin, destination = route.split("-")
    return airport_code_number(origin) * AIRPORT_CODES + airport_code_number(destination)


def test_ids_are_distinct_and_decode_to_their_route():
    ids = [_id(route) for route in ROUTES]
    assert len(set(ids)) == len(ROUTES)
    assert [route_of(i) for i in ids] == ROUTES
    assert _id("AAA-AAA") == 0 and _id("ZZZ-ZZZ") == AIRPORT_CODES ** 2 - 1


def test_code_numbers_of_valid_rows_only():
    codes = pa.array(["ATL", "bad", None, "ZZZ", "ATL"])
    valid = np.array([True, False, False, True, True])
    numbers = airport_code_numbers(codes, valid)
    assert numbers.tolist() == [airport_code_number("ATL"), 0, 0, AIRPORT_CODES - 1,
                                airport_code_number("ATL")]


def test_spark_decodes_ids_as_python_does(spark):
    frame = spark.createDataFrame([(_id(route),) for route in ROUTES] + [(None,)],
                                  "route_id long")
    texts = [row[0] for row in frame.select(route_text(F.col("route_id"))).collect()]
    assert texts == [*ROUTES, None]
