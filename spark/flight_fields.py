"""The query fields of flight rows, derived once and columnar (pyarrow.compute) where the rows
are decoded: in the `kaska` source's Python worker, before Spark sees a row (issue 23).

`derive(table)` maps the seven string columns of `spark.queries.FLIGHT_COLUMNS` to
`DERIVED_SCHEMA`: each row's first failed validity rule (null when valid) and, for valid rows,
the parsed fare, the duration in minutes, the stopover count, the given distance when it is
positive and finite, and only where a query can read them the stopovers text and the original
`travelDuration` (rows with at least `Q1_STOPOVER_COUNT_MIN` stopovers: Q1 and Q3) and the
airport chain (rows without a usable given distance: Q2 sums their legs). Spark then joins the
airports and computes the queries from these narrow typed columns
(`spark.queries.prepare_derived_flights`) instead of parsing seven strings per row itself.

The rules are those of `spark.queries` (QUERIES.md, and the decisions its module doc lists),
written for RE2 and Arrow's casts; tests run every query suite through both paths and compare
them with the plain-Python reference:
- RE2 has no lookahead: `DURATION_REGEX`'s "at least one component" and "a T is followed by a
  component" are checks on the captured groups instead;
- numbers match `NUMBER_REGEX` first, then Arrow's cast (correctly rounded, as Java's
  `Double.parseDouble`; an overflow is infinity there too, which the finiteness rule refuses).

Pure functions over pyarrow tables; thread-safe.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark.queries import (
    FLIGHT_COLUMNS,
    INVALID_KINDS,
    MINUTES_PER_DAY,
    MINUTES_PER_HOUR,
    Q1_STOPOVER_COUNT_MIN,
    SECONDS_PER_MINUTE,
    SEGMENT_SEPARATOR,
    duration_component_digits_max,
)

INVALID_KIND, FARE, DURATION_MINUTES = "invalid_kind", "totalFare", "duration_minutes"
STOPOVER_COUNT, STOPOVERS, GIVEN_MILES, CHAIN = ("stopover_count", "stopovers", "given_miles",
                                                 "chain")
DERIVED_SCHEMA = pa.schema([
    (INVALID_KIND, pa.string()),
    ("legId", pa.string()),
    ("startingAirport", pa.string()),
    ("destinationAirport", pa.string()),
    ("travelDuration", pa.string()),  # only where STOPOVERS is set (Q3 prints it)
    (FARE, pa.float64()),
    (DURATION_MINUTES, pa.int64()),
    (STOPOVER_COUNT, pa.int32()),
    (STOPOVERS, pa.string()),
    (GIVEN_MILES, pa.float64()),
    (CHAIN, pa.list_(pa.string())),
])

# RE2 forms of spark.queries' Java regexes (`\z`: the very end, as there).
_AIRPORT_CODE_RE2 = r"^[A-Z]{3}\z"
_NUMBER_RE2 = r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?\z"
_N = f"(?P<{{}}>[0-9]{{{{1,{duration_component_digits_max}}}}})"
_DURATION_RE2 = (rf"^P(?:{_N.format('days')}D)?(?P<time>T(?:{_N.format('hours')}H)?"
                 rf"(?:{_N.format('minutes')}M)?(?:{_N.format('seconds')}S)?)?\z")
_DURATION_PARTS = (("days", MINUTES_PER_DAY), ("hours", MINUTES_PER_HOUR), ("minutes", 1))


def _is_empty(text: pa.ChunkedArray | pa.Array) -> pa.Array:
    return pc.fill_null(pc.equal(text, ""), True)


def _matches(text, regex: str) -> pa.Array:
    """True/False, never null: a null text does not match."""
    return pc.fill_null(pc.match_substring_regex(text, regex), False)


def parse_number(text) -> pa.Array:
    """The double of a plain decimal literal (infinity if it overflows); null otherwise."""
    literal = pc.if_else(_matches(text, _NUMBER_RE2), text, pa.scalar(None, pa.string()))
    return pc.cast(literal, pa.float64())


def _is_finite(number) -> pa.Array:
    return pc.fill_null(pc.is_finite(number), False)


def duration_minutes(text) -> tuple[pa.Array, pa.Array]:
    """(matches DURATION_REGEX, whole minutes of the rows that match).

    Worked out once per distinct text: a session holds a few thousand distinct durations in
    millions of rows, and the regex with its captures is the costliest step of `derive`
    (200k generated rows in 10k-row batches: 0.073 CPU-s row by row, 0.043 per distinct
    text, hashing included; `derive` 0.155 -> 0.124)."""
    distinct = pc.dictionary_encode(_array(pc.fill_null(text, "")))
    ok, minutes = _duration_minutes_distinct(distinct.dictionary)
    return ok.take(distinct.indices), minutes.take(distinct.indices)


def _duration_minutes_distinct(text: pa.Array) -> tuple[pa.Array, pa.Array]:
    parts = pc.extract_regex(text, _DURATION_RE2)
    matched = pc.is_valid(parts)
    time_part = pc.struct_field(parts, "time")
    has_time = pc.not_equal(time_part, "")
    component = [pc.not_equal(pc.struct_field(parts, name), "")
                 for name in ("days", "hours", "minutes", "seconds")]
    any_time_component = pc.or_(pc.or_(component[1], component[2]), component[3])
    # `P` alone, or a `T` without a component after it, is no duration.
    ok = pc.fill_null(pc.and_(matched, pc.and_(pc.or_(component[0], any_time_component),
                                               pc.or_(pc.invert(has_time),
                                                      any_time_component))), False)
    minutes = pa.scalar(0, pa.int64())
    for name, factor in _DURATION_PARTS:
        minutes = pc.add(minutes, pc.multiply(_component(parts, name), factor))
    minutes = pc.add(minutes, pc.divide(_component(parts, "seconds"), SECONDS_PER_MINUTE))
    return ok, pc.if_else(ok, minutes, pa.scalar(None, pa.int64()))


def _component(parts, name: str) -> pa.Array:
    text = pc.struct_field(parts, name)
    return pc.cast(pc.if_else(pc.equal(text, ""), "0", text), pa.int64())


def invalid_kinds(table: pa.Table, fare, duration_ok) -> pa.Array:
    """The first validity rule each row fails (INVALID_KINDS order), null when valid."""
    airports_ok = pc.and_(_matches(table["startingAirport"], _AIRPORT_CODE_RE2),
                          _matches(table["destinationAirport"], _AIRPORT_CODE_RE2))
    fails = [
        _is_empty(table["legId"]),
        pc.invert(airports_ok),
        pc.invert(duration_ok),
        pc.invert(pc.and_(_is_finite(fare), pc.fill_null(pc.greater_equal(fare, 0), False))),
        _is_empty(table["segmentsArrivalAirportCode"]),
    ]
    kind = pa.nulls(table.num_rows, pa.string())
    for name, failed in reversed(list(zip(INVALID_KINDS, fails, strict=True))):
        kind = pc.if_else(failed, pa.scalar(name, pa.string()), kind)
    return kind


def derive(table: pa.Table) -> pa.Table:
    """`DERIVED_SCHEMA` of a table holding (at least) FLIGHT_COLUMNS as strings."""
    table = pa.Table.from_arrays([_array(table[name]) for name in FLIGHT_COLUMNS],
                                 names=list(FLIGHT_COLUMNS))
    fare = parse_number(table["totalFare"])
    duration_ok, minutes = duration_minutes(table["travelDuration"])
    kind = invalid_kinds(table, fare, duration_ok)
    valid = pc.is_null(kind)
    segments = _array(pc.split_pattern(pc.fill_null(table["segmentsArrivalAirportCode"], ""),
                                       SEGMENT_SEPARATOR))
    count = pc.subtract(pc.list_value_length(segments), 1).cast(pa.int32())
    given = parse_number(table["totalTravelDistance"])
    given = pc.if_else(pc.and_(_is_finite(given), pc.fill_null(pc.greater(given, 0), False)),
                       given, pa.scalar(None, pa.float64()))
    q1_row = pc.and_(valid, pc.greater_equal(count, Q1_STOPOVER_COUNT_MIN))
    needs_legs = pc.and_(valid, pc.is_null(given))
    return pa.Table.from_arrays([
        kind,
        table["legId"],
        table["startingAirport"],
        table["destinationAirport"],
        _where(q1_row, table["travelDuration"]),
        _where(valid, fare),
        _where(valid, minutes),
        _where(valid, count),
        _where(q1_row, _stopovers(segments)),
        _where(valid, given),
        _chains(needs_legs, table["startingAirport"], segments),
    ], schema=DERIVED_SCHEMA)


def _array(values) -> pa.Array:
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values


def _where(mask, values) -> pa.Array:
    values = _array(values)
    return pc.if_else(mask, values, pa.scalar(None, values.type))


def _list_parts(lists: pa.ListArray) -> tuple[np.ndarray, pa.Array]:
    """(offsets from 0, the values they index) of a list array without null lists."""
    offsets = lists.offsets.to_numpy()
    return offsets - offsets[0], lists.flatten()


def _stopovers(segments: pa.ListArray) -> pa.Array:
    """Every segment's arrival but the last, joined with `||` (one or more segments a row)."""
    offsets, values = _list_parts(segments)
    keep = np.ones(len(values), dtype=bool)
    keep[offsets[1:] - 1] = False  # each row's last element
    shortened = pa.ListArray.from_arrays(
        pa.array(offsets - np.arange(len(offsets)), pa.int32()), values.filter(pa.array(keep)))
    return pc.binary_join(shortened, SEGMENT_SEPARATOR)


def _chains(needs_legs, origins, segments: pa.ListArray) -> pa.Array:
    """[origin, every segment's arrival...] where `needs_legs`, null elsewhere."""
    rows = pa.array(np.flatnonzero(needs_legs.to_numpy(zero_copy_only=False)), pa.int64())
    offsets, values = _list_parts(segments.take(rows))
    firsts = offsets[:-1] + np.arange(len(offsets) - 1)  # where each origin lands
    places = np.empty(len(values) + len(firsts), dtype=np.int64)
    places[firsts] = len(values) + np.arange(len(firsts))  # an origin, from after the values
    rest = np.ones(len(places), dtype=bool)
    rest[firsts] = False
    places[rest] = np.arange(len(values))
    items = pa.concat_arrays([values, _array(origins).take(rows).cast(pa.string())]).take(
        pa.array(places))
    picked = pa.ListArray.from_arrays(pa.array(offsets + np.arange(len(offsets)), pa.int32()),
                                      items)
    chains = pa.nulls(len(needs_legs), picked.type)
    # Scatter the picked chains back to their rows.
    index = np.full(len(needs_legs), -1, dtype=np.int64)
    index[rows.to_numpy()] = np.arange(len(rows))
    positions = pa.array(index, mask=index < 0)
    return picked.take(positions) if len(rows) else chains
