"""The query fields of flight rows, derived once and columnar (pyarrow.compute) where the rows
are decoded: in the `kaska` source's Python worker, before Spark sees a row (Spark then
caches narrow columns, not seven strings per row: docs/benchmarks.md).

`derive(table, coordinates_json)` maps the seven string columns of
`spark.rules.contract.FLIGHT_COLUMNS` to `DERIVED_SCHEMA`, given the session's airports
(`spark.rules.airport_distances.AirportCoordinates` as JSON). Per row: its first failed
validity rule (null when valid); for valid rows the route as one integer
(`spark.rules.route_id`), the parsed fare and whether both airports are known (Q2 counts the rows
it skips); and only where a query prints them, the rest:
- Q1 rows (at least `Q1_STOPOVER_COUNT_MIN` stopovers, which Q3 ranks): legId, the original
  `travelDuration`, the duration in minutes and the stopovers text;
- Q2 rows (a known total distance over `Q2_DETOUR_FACTOR` times the direct one): legId and the
  total distance, the given one or the sum of the legs (`spark.rules.airport_distances`).
Spark then caches these narrow columns and computes the queries from them
(`spark.rules.derived_queries`): a long, a double and two booleans for most rows, not seven
strings.

The rules are those of spark/rules/query_frames.py (docs/queries.md, and the decisions its module
doc lists), with the names and numbers of spark/rules/contract.py,
written for RE2 and Arrow's casts; tests run every query suite through both paths and compare
them with the plain-Python reference:
- RE2 has no lookahead: `DURATION_REGEX`'s "at least one component" and "a T is followed by a
  component" are checks on the captured groups instead;
- the airport-code rule is `spark.rules.route_id.is_airport_code`, checked once per distinct
  code in the pass that also numbers the codes for the route id;
- numbers match `NUMBER_REGEX` first, then Arrow's cast (correctly rounded, as Java's
  `Double.parseDouble`; an overflow is infinity there too, which the finiteness rule refuses).

Pure functions over pyarrow tables; thread-safe.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from common.flights.arrow_rows import whole_array
from spark.rules.airport_distances import AirportTable, airport_table, haversine_miles
from spark.rules.contract import (
    DURATION_MINUTES,
    ENDPOINTS_KNOWN,
    FARE,
    FLIGHT_COLUMNS,
    INVALID_KIND,
    INVALID_KINDS,
    MINUTES_PER_DAY,
    MINUTES_PER_HOUR,
    Q1_STOPOVER_COUNT_MIN,
    Q2_DETOUR_FACTOR,
    SECONDS_PER_MINUTE,
    SEGMENT_SEPARATOR,
    STOPOVERS,
    TOTAL_DISTANCE,
    duration_component_digits_max,
)
from spark.rules.route_id import AIRPORT_CODES, airport_codes

ROUTE_ID = "route_id"  # the route as one integer (spark/rules/route_id.py)
DERIVED_SCHEMA = pa.schema([
    (INVALID_KIND, pa.string()),  # null when valid; the columns below are null when invalid
    (ROUTE_ID, pa.int64()),
    (FARE, pa.float64()),
    (ENDPOINTS_KNOWN, pa.bool_()),  # both airports in the airports file
    ("legId", pa.string()),  # Q1 and Q2 rows only
    ("travelDuration", pa.string()),  # Q1 rows only (the three below too)
    (DURATION_MINUTES, pa.int64()),
    (STOPOVERS, pa.string()),
    (TOTAL_DISTANCE, pa.float64()),  # Q2 rows only
])

# RE2 forms of spark.rules.contract's Java regexes (`\z`: the very end, as there).
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
    distinct = pc.dictionary_encode(whole_array(pc.fill_null(text, "")))
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


def invalid_kinds(table: pa.Table, fare, duration_ok, airports_ok: np.ndarray) -> pa.Array:
    """The first validity rule each row fails (INVALID_KINDS order), null when valid;
    `airports_ok`: both airports are codes (`spark.rules.route_id.airport_codes`)."""
    fails = [
        _is_empty(table["legId"]),
        pa.array(~airports_ok),
        pc.invert(duration_ok),
        pc.invert(pc.and_(_is_finite(fare), pc.fill_null(pc.greater_equal(fare, 0), False))),
        _is_empty(table["segmentsArrivalAirportCode"]),
    ]
    kind = pa.nulls(table.num_rows, pa.string())
    for name, failed in reversed(list(zip(INVALID_KINDS, fails, strict=True))):
        kind = pc.if_else(failed, pa.scalar(name, pa.string()), kind)
    return kind


def derive(table: pa.Table, coordinates_json: str) -> pa.Table:
    """`DERIVED_SCHEMA` of a table holding (at least) FLIGHT_COLUMNS as strings, given the
    session's airports (`AirportCoordinates.to_json()`)."""
    airports = airport_table(coordinates_json)
    table = pa.Table.from_arrays([whole_array(table[name]) for name in FLIGHT_COLUMNS],
                                 names=list(FLIGHT_COLUMNS))
    fare = parse_number(table["totalFare"])
    duration_ok, minutes = duration_minutes(table["travelDuration"])
    origin_ok, origins = airport_codes(whole_array(table["startingAirport"]))
    destination_ok, destinations = airport_codes(whole_array(table["destinationAirport"]))
    kind = invalid_kinds(table, fare, duration_ok, origin_ok & destination_ok)
    valid = pc.is_null(kind)
    valid_rows = valid.to_numpy(zero_copy_only=False)
    segments = whole_array(pc.split_pattern(pc.fill_null(table["segmentsArrivalAirportCode"], ""),
                                       SEGMENT_SEPARATOR))
    count = pc.subtract(pc.list_value_length(segments), 1)
    q1_row = pc.and_(valid, pc.greater_equal(count, Q1_STOPOVER_COUNT_MIN))
    known, q2_distance = _q2_distances(airports, table, segments, valid_rows, origins,
                                       destinations)
    q2_row = pa.array(~np.isnan(q2_distance))
    return pa.Table.from_arrays([
        kind,
        pa.array(origins * AIRPORT_CODES + destinations, pa.int64(), mask=~valid_rows),
        _where(valid, fare),
        pa.array(known, pa.bool_(), mask=~valid_rows),
        _where(pc.or_(q1_row, q2_row), table["legId"]),
        _where(q1_row, table["travelDuration"]),
        _where(q1_row, minutes),
        _only_at(q1_row.to_numpy(zero_copy_only=False), _stopovers, segments),
        pa.array(q2_distance, pa.float64(), mask=~q2_row.to_numpy(zero_copy_only=False)),
    ], schema=DERIVED_SCHEMA)


def _q2_distances(airports: AirportTable, table: pa.Table, segments: pa.ListArray,
                  valid: np.ndarray, origins: np.ndarray, destinations: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(both airports known, per valid row; the total distance of each Q2 row, NaN for every
    other row)."""
    origin_lat, origin_lon = airports.locate_numbers(origins)
    destination_lat, destination_lon = airports.locate_numbers(destinations)
    known = valid & ~np.isnan(origin_lat) & ~np.isnan(destination_lat)
    given = parse_number(table["totalTravelDistance"]).to_numpy(zero_copy_only=False)
    with np.errstate(invalid="ignore"):
        given = np.where(np.isfinite(given) & (given > 0), given, np.nan)
    total = np.full(len(valid), np.nan)
    rows = np.flatnonzero(known)
    total[rows] = given[rows]
    # Only the rows without a usable given distance (~6 % of real rows) are summed by leg.
    by_legs = rows[np.isnan(given[rows])]
    indices = pa.array(by_legs, pa.int64())
    total[by_legs] = airports.chain_miles(whole_array(table["startingAirport"]).take(indices),
                                          segments.take(indices))
    # Worked out once per distinct route: a batch holds a few hundred routes.
    routes, first_rows, route_of_row = np.unique(origins[rows] * AIRPORT_CODES
                                                 + destinations[rows], return_index=True,
                                                 return_inverse=True)
    firsts = rows[first_rows]
    direct = np.full(len(valid), np.nan)
    direct[rows] = haversine_miles(origin_lat[firsts], origin_lon[firsts],
                                   destination_lat[firsts], destination_lon[firsts]
                                   )[route_of_row]
    with np.errstate(invalid="ignore"):
        q2_row = total > Q2_DETOUR_FACTOR * direct  # False wherever either is NaN
    return known, np.where(q2_row, total, np.nan)



def _where(mask, values) -> pa.Array:
    values = whole_array(values)
    return pc.if_else(mask, values, pa.scalar(None, values.type))


def _only_at(rows: np.ndarray, compute, values: pa.Array) -> pa.Array:
    """`compute(values)` at `rows` (a mask) and null elsewhere, computed for those rows only
    (Q1's stopovers: a few rows in a thousand)."""
    chosen = np.flatnonzero(rows)
    computed = compute(values.take(pa.array(chosen, pa.int64())))
    # Every other row takes the one null appended after the computed values.
    positions = np.full(len(rows), len(chosen), dtype=np.int64)
    positions[chosen] = np.arange(len(chosen))
    return pa.concat_arrays([computed, pa.nulls(1, computed.type)]).take(positions)


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
