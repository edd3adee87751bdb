"""spark.rules.result_columns: a result column's texts are format_field's, value for value."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.flights.result_csv import format_field, format_row
from spark.rules.result_columns import REPR_FIXED_BELOW, REPR_FIXED_MIN, double_texts, format_table

EDGES = [0.0, -0.0, 1.0, -1.0, 123.0, 0.1, 248.6, 1e-4, -1e-4, 1e16, -1e16, 1e15, 1e-5,
         2.5e-4, 123456789012345.6, 9999999999999998.0, 5e-324, -5e-324, 2.2250738585072014e-308,
         1.7976931348623157e308, math.inf, -math.inf, math.nan,
         math.nextafter(REPR_FIXED_MIN, 0), math.nextafter(REPR_FIXED_BELOW, 0)]


def test_edges_read_as_repr():
    assert double_texts(pa.array(EDGES, pa.float64())) == [repr(v) for v in EDGES]


def test_a_null_is_empty():
    assert double_texts(pa.array([1.5, None, 2.0])) == ["1.5", "", "2.0"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=50))
def test_any_doubles_read_as_repr(values):
    assert double_texts(pa.array(values, pa.float64())) == [repr(v) for v in values]


@pytest.mark.parametrize("seed", range(3))
def test_random_bit_patterns_and_fares_read_as_repr(seed):
    rng = np.random.default_rng(seed)
    patterns = rng.integers(0, 2**64, size=20_000, dtype=np.uint64).view(np.float64)
    fares = rng.uniform(0, 5000, 20_000).round(2)
    magnitudes = 10.0 ** rng.uniform(-10, 20, 20_000) * rng.choice([-1.0, 1.0], 20_000)
    values = np.concatenate([patterns, fares, magnitudes])
    assert double_texts(pa.array(values)) == [repr(float(v)) for v in values]


def test_chunked_columns_are_read_whole():
    column = pa.chunked_array([[1.0, 2.5], [], [None, -0.0]])
    assert double_texts(column) == ["1.0", "2.5", "", "-0.0"]


def test_format_table_is_format_row_for_every_row():
    rows = [("a,b", "ATL-BOS", 248.6, "ORD||DEN||LAX"), ("", "BOS-ATL", 1e16, None),
            ("c", "JFK-LAX", -0.0, "x\ny")]
    names = ("legId", "route", "totalFare", "stopovers")
    table = pa.table({name: list(values)
                      for name, values in zip(names, zip(*rows, strict=True), strict=True)})
    assert [list(row) for row in format_table("q1", table)] == [
        format_row("q1", row) for row in rows]


def test_integers_are_their_digits():
    table = pa.table({"route": ["ATL-BOS", None], "avgFare": pa.array([3, None], pa.int64()),
                      "maxFare": [1.0, 2.0]})
    assert format_table("q4", table) == [("ATL-BOS", "3", "1.0"), ("", "", "2.0")]
    assert format_field(3) == "3" and format_field(None) == ""


def test_a_column_of_another_type_is_refused():
    table = pa.table({"route": ["ATL-BOS"], "avgFare": [True], "maxFare": [1.0]})
    with pytest.raises(TypeError, match="bool"):
        format_table("q4", table)


def test_the_bit_patterns_cover_every_layout():
    """The random patterns above reach both the fixed and the exponent layouts of repr."""
    values = np.random.default_rng(0).integers(0, 2**64, size=20_000,
                                               dtype=np.uint64).view(np.float64)
    texts = [repr(float(v)) for v in values]
    assert any("e" in text for text in texts) and any(
        "e" not in text and text not in ("nan", "inf", "-inf") for text in texts)
