"""Malformed rows: each kind breaks exactly one validity rule of QUERIES.md ("Valid rows").

A row gets at most one kind. Every replacement value below is invalid under the contract
(legId non-empty; airports three letters A-Z; travelDuration parses; totalFare a finite
number >= 0; segmentsArrivalAirportCode non-empty), so a consumer's skipped-row count must
equal the sum of the counts this module reports.
"""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Kinds and the values they write; "negative_fare" prefixes the real fare with "-",
# "short_row" cuts the row after SHORT_ROW_FIELDS_MAX fields or fewer.
BAD_AIRPORT_CODES = ("", "XX", "ABCD", "A1C", "J-K", "123")
BAD_DURATIONS = ("", "2H30M", "PT2X", "P1DT2H5", "PT-5M", "forever", "PTH")
BAD_FARES = ("", "N/A", "12.3.4", "$248.60", "abc", "1,234.00")
NON_FINITE_FARES = ("NaN", "nan", "inf", "Infinity", "-Infinity")
# segmentsArrivalAirportCode is field 20 (1-based): keep at most 19 so it is always missing.
SHORT_ROW_FIELDS_MAX = 19

# Columns that receive invalid values (and so may need quoting: "1,234.00").
WRITTEN_COLUMNS: tuple[str, ...] = (
    "legId", "startingAirport", "destinationAirport", "travelDuration", "totalFare",
    "segmentsArrivalAirportCode",
)

KINDS: tuple[str, ...] = (
    "empty_leg_id",
    "bad_airport_code",
    "bad_duration",
    "bad_fare",
    "negative_fare",
    "non_finite_fare",
    "empty_segment_arrivals",
    "short_row",
)


def _pick(rng, choices: tuple[str, ...], count: int) -> pa.Array:
    return pa.array(np.asarray(choices, dtype=object)[rng.integers(0, len(choices), count)],
                    type=pa.string())


def _mask(n: int, rows: np.ndarray) -> pa.Array:
    mask = np.zeros(n, dtype=bool)
    mask[rows] = True
    return pa.array(mask)


def _replace(columns: dict[str, pa.Array], name: str, rows: np.ndarray, values: pa.Array):
    """Put `values` at `rows` (ascending) of column `name`."""
    column = columns[name]
    columns[name] = pc.replace_with_mask(column, _mask(len(column), rows), values)


def _cut_short(rng, columns: dict[str, pa.Array], rows: np.ndarray) -> None:
    """Keep only the first 1..SHORT_ROW_FIELDS_MAX fields of each row (nulls are not written)."""
    kept = rng.integers(1, SHORT_ROW_FIELDS_MAX + 1, size=len(rows))
    for position, name in enumerate(list(columns)):
        cut = rows[kept <= position]
        if len(cut):
            _replace(columns, name, cut, pa.nulls(len(cut), type=pa.string()))


def inject(rng, columns: dict[str, pa.Array], rate: float) -> dict[str, int]:
    """Corrupt about `rate` of the rows in place; return how many rows got each kind."""
    n = len(columns["legId"])
    count = int(rng.binomial(n, rate)) if rate > 0 else 0
    rows = rng.choice(n, size=count, replace=False)
    kind_of = rng.integers(0, len(KINDS), size=count)
    counts = {}
    for k, kind in enumerate(KINDS):
        mine = np.sort(rows[kind_of == k])
        counts[kind] = len(mine)
        if len(mine) == 0:
            continue
        _corrupt(rng, columns, kind, mine)
    return counts


def _corrupt(rng, columns: dict[str, pa.Array], kind: str, rows: np.ndarray) -> None:
    count = len(rows)
    if kind == "empty_leg_id":
        _replace(columns, "legId", rows, pa.array([""] * count))
    elif kind == "bad_airport_code":
        at_origin = rng.random(count) < 0.5
        for name, side in (("startingAirport", at_origin), ("destinationAirport", ~at_origin)):
            if side.any():
                _replace(columns, name, rows[side],
                         _pick(rng, BAD_AIRPORT_CODES, int(side.sum())))
    elif kind == "bad_duration":
        _replace(columns, "travelDuration", rows, _pick(rng, BAD_DURATIONS, count))
    elif kind == "bad_fare":
        _replace(columns, "totalFare", rows, _pick(rng, BAD_FARES, count))
    elif kind == "negative_fare":
        fares = pc.take(columns["totalFare"], rows)
        _replace(columns, "totalFare", rows, pc.binary_join_element_wise("-", fares, ""))
    elif kind == "non_finite_fare":
        _replace(columns, "totalFare", rows, _pick(rng, NON_FINITE_FARES, count))
    elif kind == "empty_segment_arrivals":
        _replace(columns, "segmentsArrivalAirportCode", rows, pa.array([""] * count))
    elif kind == "short_row":
        _cut_short(rng, columns, rows)
    else:
        raise AssertionError(f"unknown invalid kind {kind}")
