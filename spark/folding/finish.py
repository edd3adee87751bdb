"""A session's finish: Q3 and Q4 from its folded state, once every row is folded.

- Q3: the Q3_ROWS_PER_ROUTE_MAX shortest Q1 rows per route are the state's candidates already.
- Q4: `mean` = the average fare of every valid row, computed as QUERIES.md's reference does:
  the correctly rounded sum of every fare (what `math.fsum` gives over the rows; here exact,
  in integers, over the distinct fares times their counts) divided by the count. Then, per
  route, over the fares strictly above it: the average and the maximum. Exactness of the
  threshold matters: a fare equal to the mean is out, and a mean off by one ulp would take it in.

Pure functions over the state's Arrow tables; thread-safe.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark.flight_fields import FARE, ROUTE_ID, STOPOVERS
from spark.folding.batch_fold import COUNT, route_texts
from spark.queries import Q3_COLUMNS, Q4_COLUMNS

MANTISSA_BITS = 53


def mean_fare(q4_map: pa.Table) -> float | None:
    """The mean fare of the rows `q4_map` (route, fare, n) counts; None without rows."""
    by_fare = q4_map.group_by([FARE], use_threads=False).aggregate([(COUNT, "sum")])
    fares = by_fare[FARE].to_pylist()
    counts = by_fare[f"{COUNT}_sum"].to_pylist()
    rows = sum(counts)
    if rows == 0:
        return None
    return float(exact_sum(fares, counts)) / rows


def exact_sum(values: list[float], counts: list[int]) -> Fraction:
    """sum(value * count), exactly: every double is an integer times a power of two."""
    parts = [(math.frexp(value), count) for value, count in zip(values, counts, strict=True)]
    exponent_min = min(exponent for (_, exponent), _ in parts) - MANTISSA_BITS
    total = 0
    for (mantissa, exponent), count in parts:
        integer = int(mantissa * (1 << MANTISSA_BITS))  # exact: |mantissa| in [0.5, 1)
        total += count * (integer << (exponent - MANTISSA_BITS - exponent_min))
    return Fraction(total) * Fraction(2) ** exponent_min


def q4_table(q4_map: pa.Table, mean: float | None) -> pa.Table:
    """`route,avgFare,maxFare` over the fares above `mean`."""
    if mean is None:
        above = q4_map.slice(0, 0)
    else:
        above = q4_map.filter(pc.greater(q4_map[FARE], mean))
    fares = above[FARE].to_numpy()
    counts = above[COUNT].to_numpy()
    routes = above[ROUTE_ID].to_numpy()
    distinct, index = np.unique(routes, return_inverse=True)
    sums = np.zeros(len(distinct))
    np.add.at(sums, index, fares * counts)
    totals = np.zeros(len(distinct), dtype=np.int64)
    np.add.at(totals, index, counts)
    maxima = np.full(len(distinct), -np.inf)
    np.maximum.at(maxima, index, fares)
    with np.errstate(invalid="ignore", divide="ignore"):
        averages = sums / totals
    return pa.table([route_texts(pa.array(distinct, pa.int64())), pa.array(averages),
                     pa.array(maxima)], names=list(Q4_COLUMNS))


def q3_table(candidates: pa.Table) -> pa.Table:
    """`legId,route,stopovers,travelDuration` of the candidates (already the top 2s)."""
    return pa.table([candidates["legId"], route_texts(candidates[ROUTE_ID]),
                     candidates[STOPOVERS], candidates["travelDuration"]],
                    names=list(Q3_COLUMNS))
