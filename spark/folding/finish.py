"""A session's finish: Q3 and Q4 from its folded state, once every row is folded.

- Q3: the Q3_ROWS_PER_ROUTE_MAX shortest Q1 rows per route are the state's candidates already.
- Q4: `mean` = the average fare of every valid row, computed as docs/queries.md's reference does:
  the correctly rounded sum of every fare (what `math.fsum` gives over the rows; here exact,
  in integers, over the distinct fares times their counts) divided by the count. Then, per
  route, over the fares strictly above it: the average and the maximum. Exactness of the
  threshold matters: a fare equal to the mean is out, and a mean off by one ulp would take it in.

Pure functions over the state's Arrow tables; thread-safe.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark.folding.batch_fold import COUNT, route_texts
from spark.rules.contract import Q3_COLUMNS, Q4_COLUMNS
from spark.rules.flight_fields import FARE, ROUTE_ID, STOPOVERS

MANTISSA_BITS = 53


def mean_fare(q4_rows: pa.Table) -> float | None:
    """The mean fare of the rows `q4_rows` (route, fare, n; a fare may repeat) counts; None
    without rows."""
    if q4_rows.num_rows == 0:
        return None
    # numpy, not Acero: pyarrow's group_by on this one double key took 46 s for 6M rows
    # (195k distinct fares), np.unique sorts them in well under a second.
    fares, index = np.unique(q4_rows[FARE].to_numpy(), return_inverse=True)
    counts = np.bincount(index, weights=q4_rows[COUNT].to_numpy()).astype(np.int64)
    return float(exact_sum(fares, counts)) / int(counts.sum())


def exact_sum(values: np.ndarray, counts: np.ndarray) -> Fraction:
    """sum(value * count), exactly: every double is an integer mantissa times a power of two,
    so the sum is one integer per exponent, scaled."""
    mantissas, exponents = np.frexp(values)
    integers = (mantissas * (1 << MANTISSA_BITS)).astype(np.int64)  # exact: |m| in [0.5, 1)
    exponent_min = int(exponents.min()) - MANTISSA_BITS
    total = 0
    for exponent in np.unique(exponents):
        chosen = exponents == exponent
        # Python integers: a count times a 53-bit mantissa, summed, outgrows 64 bits.
        part = sum(map(int.__mul__, counts[chosen].tolist(), integers[chosen].tolist()))
        total += part << (int(exponent) - MANTISSA_BITS - exponent_min)
    return Fraction(total) * Fraction(2) ** exponent_min


def q4_table(q4_rows: pa.Table, mean: float | None) -> pa.Table:
    """`route,avgFare,maxFare` over the fares above `mean` (`q4_rows`: route, fare, n)."""
    if mean is None:
        above = q4_rows.slice(0, 0)
    else:
        above = q4_rows.filter(pc.greater(q4_rows[FARE], mean))
    weighted = pc.multiply(above[FARE], pc.cast(above[COUNT], pa.float64()))
    table = pa.table({ROUTE_ID: above[ROUTE_ID], "fares": weighted, COUNT: above[COUNT],
                      FARE: above[FARE]})
    grouped = table.group_by([ROUTE_ID], use_threads=False).aggregate(
        [("fares", "sum"), (COUNT, "sum"), (FARE, "max")]).sort_by(ROUTE_ID)
    averages = pc.divide(grouped["fares_sum"], pc.cast(grouped[f"{COUNT}_sum"], pa.float64()))
    return pa.table([route_texts(grouped[ROUTE_ID]), averages, grouped[f"{FARE}_max"]],
                    names=list(Q4_COLUMNS))


def q3_table(candidates: pa.Table) -> pa.Table:
    """`legId,route,stopovers,travelDuration` of the candidates (already the top 2s)."""
    return pa.table([candidates["legId"], route_texts(candidates[ROUTE_ID]),
                     candidates[STOPOVERS], candidates["travelDuration"]],
                    names=list(Q3_COLUMNS))
