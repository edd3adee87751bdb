"""The row expressions of the query rules (spark/rules/query_frames.py, and the Spark-on-CSV
path's, scripts/bench/spark_csv.py) against hand-worked values and the reference parsers."""

from __future__ import annotations

import math

from pyspark.sql import functions as F

from oracle import reference
from scripts.bench.spark_csv import duration_minutes
from spark.rules.query_frames import parse_number, prepare_airports
from tests.unit.spark.rules.spark_test_frames import string_frame

DURATIONS = {
    "PT2H29M": 149, "PT58M": 58, "PT7H": 420, "P1DT19M": 1459, "P1DT2H5M": 1565,
    "P2D": 2880, "PT0M": 0, "PT1H30M59S": 90, "PT120S": 2, "P000000001DT0H": 1440,
    "": None, "P": None, "PT": None, "P1DT": None, "PT5": None, "P5": None, "pt5m": None,
    "PT1.5H": None, "PT5M5H": None, "PT1H1H": None, "P1H": None, "PT1D": None, " PT5M": None,
    "PT5M\n": None, "PT1234567890M": None, "PT1HT2M": None, "PT\u0665M": None, None: None,
}
NUMBERS = {
    "248.60": 248.6, "0": 0.0, "-7": -7.0, "+7": 7.0, "1e2": 100.0, ".5": 0.5, "5.": 5.0,
    "1E-3": 0.001, "1e-400": 0.0, "": None, "abc": None, "1.5d": None, " 12": None,
    "12\n": None, "NaN": None, "Infinity": None, "inf": None, "1e400": None, "0x10": None,
    "1_0": None, "1,5": None, "\u0665": None, None: None,
}


def _evaluate(spark, texts, expression):
    rows = [{"text": text} for text in texts]
    frame = string_frame(spark, rows).select("text", expression(F.col("text")).alias("value"))
    return {row["text"]: row["value"] for row in frame.collect()}


def test_duration_minutes(spark):
    assert _evaluate(spark, DURATIONS, duration_minutes) == DURATIONS
    assert {text: reference.parse_duration_minutes(text) for text in DURATIONS} == DURATIONS


def test_parse_number_takes_plain_finite_decimals_only(spark):
    parsed = _evaluate(spark, NUMBERS, parse_number)
    # Spark keeps an overflow as infinity; the validity and distance rules reject it.
    assert math.isinf(parsed.pop("1e400"))
    expected = {text: value for text, value in NUMBERS.items() if text != "1e400"}
    assert parsed == expected
    assert {text: reference.parse_decimal(text) for text in NUMBERS} == NUMBERS


def test_airports_one_row_per_known_code_even_with_byte_order_mark(spark):
    rows = [
        {"\ufeffAirport Code": "ATL", "Latitude": "33.6", "Longitude": "-84.4"},
        {"\ufeffAirport Code": "DUP", "Latitude": "47.4", "Longitude": "-122.3"},
        {"\ufeffAirport Code": "DUP", "Latitude": "33.6", "Longitude": "-84.5"},
        {"\ufeffAirport Code": "NUL", "Latitude": "\\N", "Longitude": "-84.4"},
        {"\ufeffAirport Code": "BIG", "Latitude": "1e999", "Longitude": "-84.4"},
        {"\ufeffAirport Code": None, "Latitude": "1", "Longitude": "2"},
    ]
    known = {row["code"]: (row["lat"], row["lon"])
             for row in prepare_airports(string_frame(spark, rows)).collect()}
    assert known == {"ATL": (33.6, -84.4), "DUP": (33.6, -84.5)}
    plain = [{k.lstrip("\ufeff"): v for k, v in row.items()} for row in rows]
    assert reference.airport_coordinates(plain) == known
