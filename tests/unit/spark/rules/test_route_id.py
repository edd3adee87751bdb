"""spark/rules/route_id.py: a route's id and its text, in the workers (numpy) and in Spark."""

from __future__ import annotations

import re

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql import functions as F

from spark.rules.contract import AIRPORT_CODE_REGEX
from spark.rules.route_id import (
    AIRPORT_CODES,
    airport_code_number,
    airport_codes,
    is_airport_code,
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


def test_codes_are_checked_and_numbered_per_row():
    codes = pa.array(["ATL", "atl", None, "ZZZ", "AT", "ATLX", "A1C", "", "ÀTL", "ATL"])
    ok, numbers = airport_codes(codes)
    assert ok.tolist() == [True, False, False, True, False, False, False, False, False, True]
    assert numbers.tolist() == [airport_code_number("ATL"), 0, 0, AIRPORT_CODES - 1, 0, 0, 0,
                                0, 0, airport_code_number("ATL")]


@given(st.text(max_size=5))
def test_the_code_rule_is_the_queries_regex(text):
    assert is_airport_code(text) == bool(re.fullmatch(AIRPORT_CODE_REGEX.removesuffix(r"\z"),
                                                      text))


def test_spark_decodes_ids_as_python_does(spark):
    frame = spark.createDataFrame([(_id(route),) for route in ROUTES] + [(None,)],
                                  "route_id long")
    texts = [row[0] for row in frame.select(route_text(F.col("route_id"))).collect()]
    assert texts == [*ROUTES, None]
