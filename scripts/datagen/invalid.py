"""Malformed rows: each kind breaks exactly one validity rule of docs/queries.md ("Valid rows").

A row gets at most one kind. Every replacement value below is invalid under the contract
(legId non-empty; airports three letters A-Z; travelDuration parses; totalFare a finite
number >= 0; segmentsArrivalAirportCode non-empty), so a consumer's skipped-row count must
equal the sum of the counts this module reports.
"""

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from scripts.datagen.csv_text import join_rows, quote_needed

# Kinds and the values they write; "negative_fare" prefixes the real fare with "-",
# "short_row" cuts the row after SHORT_ROW_FIELDS_MAX fields or fewer.
BAD_AIRPORT_CODES = ("", "XX", "ABCD", "A1C", "J-K", "123")
BAD_DURATIONS = ("", "2H30M", "PT2X", "P1DT2H5", "PT-5M", "forever", "PTH")
BAD_FARES = ("", "N/A", "12.3.4", "$248.60", "abc", "1,234.00")
NON_FINITE_FARES = ("NaN", "nan", "inf", "Infinity", "-Infinity")
# segmentsArrivalAirportCode is field 20 (1-based): keep at most 19 so it is always missing.
SHORT_ROW_FIELDS_MAX = 19

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


@dataclass
class InjectedRows:
    """What `inject` did to a chunk: rows per kind, and the rows still to be cut short."""

    counts: dict[str, int]
    short_rows: np.ndarray  # ascending row indices
    short_fields: np.ndarray  # fields each of them keeps, 1..SHORT_ROW_FIELDS_MAX


def _pick(rng, choices: tuple[str, ...], count: int) -> pa.Array:
    return pa.array(np.asarray(choices, dtype=object)[rng.integers(0, len(choices), count)],
                    type=pa.string())


def _replace(columns: dict[str, pa.Array], name: str, rows: np.ndarray, values: pa.Array):
    """Put `values` at `rows` (ascending) of column `name`, quoted where CSV needs it."""
    column = columns[name]
    mask = np.zeros(len(column), dtype=bool)
    mask[rows] = True
    columns[name] = pc.replace_with_mask(column, pa.array(mask), quote_needed(values))


def inject(rng, columns: dict[str, pa.Array], rate: float) -> InjectedRows:
    """Corrupt about `rate` of the rows of `columns` (in place) and say how.

    Short rows are only chosen here: cut them with `cut_short` once the lines are joined.
    """
    n = len(columns["legId"])
    count = int(rng.binomial(n, rate)) if rate > 0 else 0
    rows = rng.choice(n, size=count, replace=False)
    kind_of = rng.integers(0, len(KINDS), size=count)
    counts = {}
    short_rows = np.zeros(0, dtype=np.int64)
    for k, kind in enumerate(KINDS):
        mine = np.sort(rows[kind_of == k])
        counts[kind] = len(mine)
        if kind == "short_row":
            short_rows = mine
        elif len(mine):
            _corrupt(rng, columns, kind, mine)
    kept = rng.integers(1, SHORT_ROW_FIELDS_MAX + 1, size=len(short_rows))
    return InjectedRows(counts, short_rows, kept)


def cut_short(lines: pa.Array, columns: list[pa.Array], injected: InjectedRows) -> pa.Array:
    """Replace the lines of the short rows by their first few fields."""
    rows, kept = injected.short_rows, injected.short_fields
    if len(rows) == 0:
        return lines
    prefixes = []
    for position, column in enumerate(columns):
        cells = pc.take(column, rows)
        # Null cells are left out of a joined line.
        prefixes.append(pc.if_else(pa.array(kept > position), cells, pa.scalar(None, pa.string())))
    mask = np.zeros(len(lines), dtype=bool)
    mask[rows] = True
    return pc.replace_with_mask(lines, pa.array(mask), join_rows(prefixes, has_nulls=True))


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
    else:
        raise AssertionError(f"unknown invalid kind {kind}")
