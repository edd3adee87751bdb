"""A query's result rows as text, a column at a time: an Arrow table of result rows -> each
row's fields exactly as `common.flights.result_csv.format_row` writes them value by value.

Why: the session job used to take its result rows as pickled pyspark Rows and format each
value in Python: ~1 s per 114k rows (Q2 of a 2M-row session; `spark.rules.result_order` has the
measurements). Rows now come as Arrow tables and their columns are formatted here with pyarrow
(114k rows: 0.13-0.19 CPU-s against 0.19-0.26 value by value).

Strings are written as they are, integers as their digits, a null as "". A double must read as
Python's `repr`: Arrow's cast to string writes the same shortest digits that read back as the
same double, but lays some of them out differently: "123" for 123.0, "-0" for -0.0, an exponent
for large values with many digits ("1.234567890123456e+14") and fixed digits below 1e-4
("0.00001"). So a double in [1e-4, 1e16), or a zero, whose Arrow text has no exponent takes that
text, with ".0" added when it has no "."; `repr` itself formats every other one (values a result
rarely holds: huge, tiny, infinite or NaN). A property test holds this to `repr` over random
doubles of every magnitude.

Pure functions; thread-safe.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from common.flights.arrow_rows import whole_array
from common.flights.result_csv import QUERY_HEADERS

# Python's repr writes a double in fixed notation when its decimal exponent is in [-4, 16).
REPR_FIXED_MIN, REPR_FIXED_BELOW = 1e-4, 1e16


def double_texts(values: pa.Array | pa.ChunkedArray) -> list[str]:
    """`repr` of every double ("" for a null), in order."""
    values = whole_array(values)
    texts = pc.cast(values, pa.string())
    magnitude = pc.abs(values)
    in_fixed_range = pc.and_(
        pc.and_(pc.is_finite(values), pc.less(magnitude, REPR_FIXED_BELOW)),
        pc.or_(pc.greater_equal(magnitude, REPR_FIXED_MIN), pc.equal(values, 0.0)))
    arrow_fixed = pc.and_(in_fixed_range, pc.invert(pc.match_substring(texts, "e")))
    integral = pc.and_(arrow_fixed, pc.invert(pc.match_substring(texts, ".")))
    texts = pc.if_else(integral, pc.binary_join_element_wise(texts, ".0", ""), texts)
    out = texts.fill_null("").to_pylist()
    by_repr = pc.and_(values.is_valid(), pc.invert(arrow_fixed.fill_null(False)))
    for i in np.flatnonzero(by_repr.to_numpy(zero_copy_only=False)):
        out[i] = repr(values[int(i)].as_py())
    return out


def column_texts(values: pa.Array | pa.ChunkedArray) -> list[str]:
    """The text of every value of one result column, as `format_field` writes it."""
    kind = values.type
    if pa.types.is_floating(kind):
        return double_texts(pc.cast(values, pa.float64()))
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return pc.fill_null(values, "").to_pylist()
    if pa.types.is_integer(kind):
        return pc.fill_null(pc.cast(values, pa.string()), "").to_pylist()
    raise TypeError(f"unexpected result column of type {kind}")


def format_table(query: str, table: pa.Table) -> list[tuple[str, ...]]:
    """The formatted fields of every row of `table` (its columns in the query's header order),
    in order."""
    header = QUERY_HEADERS[query]
    assert table.num_columns == len(header), (
        f"{query} rows have {len(header)} fields, got {table.num_columns}")
    columns = [column_texts(column) for column in table.columns]
    return list(zip(*columns, strict=True))

