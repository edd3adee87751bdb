"""Q1-Q4 of QUERIES.md as DataFrame -> DataFrame functions, in Spark SQL expressions only.

Input frames (whatever their origin: the CSV files, or the `kaska` source's Arrow batches):
- flights: string columns named by the CSV header; only `FLIGHT_COLUMNS` are read, any other
  column (the other Kaggle fields, `client_id`, `message_id`, `row_id`) is ignored;
- airports: string columns `Airport Code`, `Latitude`, `Longitude` (others ignored).
Null and "" are the same thing here: Spark's CSV reader turns an empty field into null.

Plan (`compute_all`, what Spark does with the CSV files): `prepare_flights` classifies every
row (the first validity rule it fails, or valid), derives route / stopovers / duration / direct
distance through two broadcast joins with the airports, and is cached; one aggregation over
the cache yields the invalid counts, the rows Q2 skips and Q4's mean; the four queries then
read the cache. Only the ~6 % of rows without a usable `totalTravelDistance` are exploded into
legs for Q2, joined with the broadcast airports and summed back in chain order. A session job
instead reads rows whose query fields the `kaska` source's Python workers derived already,
columnar (`spark.derived_queries`, which shares this module's rules and helpers).

Decisions QUERIES.md leaves open (the reference in tests makes the same ones):
- numbers (`totalFare`, `totalTravelDistance`, coordinates) are plain decimal literals
  (`NUMBER_REGEX`); Spark's cast alone would also take "1.5d", " 1.5 " or "Infinity";
- `travelDuration` is `P[nD][T[nH][nM][nS]]` with at least one component, each of at most
  `duration_component_digits_max` digits; seconds count in whole minutes (floored);
- an airport is known when its code is non-empty and both coordinates parse as finite
  numbers; a code listed twice keeps its smallest (latitude, longitude);
- Q1's `totalFare` is the parsed double, not the original text;
- Q3 breaks ties after `legId` and `totalFare` by `stopovers`, then `travelDuration`, so that
  its output is deterministic even for rows equal in every specified key.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from common.flights.result_csv import QUERY_HEADERS
from spark.csv_input import strip_byte_order_mark

FLIGHT_COLUMNS = (
    "legId",
    "startingAirport",
    "destinationAirport",
    "travelDuration",
    "totalFare",
    "totalTravelDistance",
    "segmentsArrivalAirportCode",
)
AIRPORT_CODE, AIRPORT_LATITUDE, AIRPORT_LONGITUDE = "Airport Code", "Latitude", "Longitude"
AIRPORT_COLUMNS = (AIRPORT_CODE, AIRPORT_LATITUDE, AIRPORT_LONGITUDE)

# Validity rules in QUERIES.md order; a row counts under the first one it fails.
INVALID_KINDS = ("empty_leg_id", "bad_airport_code", "bad_duration", "bad_fare", "empty_segments")

EARTH_RADIUS_MILES = 3958.8
MINUTES_PER_DAY, MINUTES_PER_HOUR, SECONDS_PER_MINUTE = 1440, 60, 60
Q1_STOPOVER_COUNT_MIN = 3
Q2_DETOUR_FACTOR = 4
Q3_ROWS_PER_ROUTE_MAX = 2
duration_component_digits_max = 9  # 999,999,999 days in minutes still fits a bigint

SEGMENT_SEPARATOR = "||"
_SEGMENT_SEPARATOR_REGEX = r"\|\|"
# Java regexes: `\z` is the very end of the input (`$` would also match before a final "\n").
AIRPORT_CODE_REGEX = r"^[A-Z]{3}\z"
NUMBER_REGEX = r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?\z"
_N = f"([0-9]{{1,{duration_component_digits_max}}})"
DURATION_REGEX = rf"^P(?=[0-9T])(?:{_N}D)?(?:T(?=[0-9])(?:{_N}H)?(?:{_N}M)?(?:{_N}S)?)?\z"

Q1_COLUMNS, Q2_COLUMNS = QUERY_HEADERS["q1"], QUERY_HEADERS["q2"]
Q3_COLUMNS, Q4_COLUMNS = QUERY_HEADERS["q3"], QUERY_HEADERS["q4"]

# Columns of the prepared (cached) frame.
_ROW_KEY = "row_key"
_INVALID_KIND = "invalid_kind"
_FARE = "totalFare"  # the parsed double; the source string column is not kept
_DURATION_MINUTES = "duration_minutes"
_STOPOVER_COUNT = "stopover_count"
_DIRECT_MILES = "direct_miles"
_ENDPOINTS_KNOWN = "endpoints_known"
_GIVEN_MILES = "given_miles"
_CHAIN = "chain"  # starting airport + every segment's arrival airport; only for rows Q2 needs
_TOTAL_DISTANCE = "totalDistance"
_Q4_MEAN = "q4_mean_fare"
_Q4_MEAN_SCHEMA = f"{_Q4_MEAN} double"


# Spark settings the plan above runs best with; every session running `compute_all` sets them.
# The prepared rows are cached once and read five times: building the cache with compression
# cost 42 CPU-s against 31 without, for 2M rows through the `kaska` source on local[2]
# (prepare + the five reads; the compression only saves memory, and MEMORY_AND_DISK spills
# what does not fit).
#
# Spark's cache of generated code (a static setting: it holds when set before the session
# starts) keeps 100 classes by default, in a cache split four ways: the service's warm-up
# compiles ~80, a session ~25, so the next session found its own code evicted and compiled
# it again (Janino, then the JIT's C1 and C2 over the new classes): 23 of a warm 2M-row
# session's 25 classes, against 2 with room for 2,000 (a class is a few KB to ~15 KB).
SESSION_CONFIG = {"spark.sql.inMemoryColumnarStorage.compressed": "false",
                  "spark.sql.codegen.cache.maxEntries": "2000"}


class MissingColumnsError(ValueError):
    """An input frame lacks a column the queries read (columns are found by header name)."""


@dataclass(frozen=True)
class QueryResults:
    """The four result frames (lazy, reading the cached prepared rows) and the run's counts.

    Call `release()` once the frames have been collected, to drop the cached rows.
    """

    q1: DataFrame
    q2: DataFrame
    q3: DataFrame
    q4: DataFrame
    rows: int
    valid_rows: int
    invalid_counts: dict[str, int]  # every kind of INVALID_KINDS, zeros included
    q2_skipped: int  # valid rows whose origin or destination is not a known airport
    mean_fare: float | None  # Q4's threshold; None without valid rows
    cached: tuple[DataFrame, ...]  # what `release` unpersists

    @classmethod
    def of(cls, counts: dict, frames: dict[str, DataFrame],
           cached: tuple[DataFrame, ...]) -> QueryResults:
        """The results of `frames` (q1 ... q4) and of `count_rows`' `counts`."""
        return cls(**frames, rows=counts["rows"], valid_rows=counts["valid_rows"],
                   invalid_counts={kind: counts[kind] for kind in INVALID_KINDS},
                   q2_skipped=counts["q2_skipped"], mean_fare=counts["mean_fare"],
                   cached=cached)

    def frames(self) -> dict[str, DataFrame]:
        return {"q1": self.q1, "q2": self.q2, "q3": self.q3, "q4": self.q4}

    def release(self) -> None:
        for frame in self.cached:
            frame.unpersist()


def compute_all(flights: DataFrame, airports: DataFrame) -> QueryResults:
    """Every query over one client's flights and airports, sharing one cached pass."""
    # Both cached: the airports feed four broadcasts, the prepared rows every query.
    coordinates = prepare_airports(airports).cache()
    return _compute(prepare_flights(flights, coordinates).cache(), coordinates)


def _compute(prepared: DataFrame, coordinates: DataFrame) -> QueryResults:
    counts = count_rows(prepared)
    frames = {"q1": q1(prepared), "q2": q2(prepared, coordinates), "q3": q3(prepared),
              "q4": q4(prepared, counts["mean_fare"])}
    return QueryResults.of(counts, frames, cached=(prepared, coordinates))


# --- inputs -----------------------------------------------------------------------------------


def prepare_airports(airports: DataFrame) -> DataFrame:
    """`code, lat, lon` of every known airport, one row per code."""
    # The airports file starts with a byte-order mark; a reader other than ours may keep it.
    airports = strip_byte_order_mark(airports)
    require_columns(airports, AIRPORT_COLUMNS, "airports")
    latitude = parse_number(F.col(AIRPORT_LATITUDE))
    longitude = parse_number(F.col(AIRPORT_LONGITUDE))
    known = (
        airports.select(F.col(AIRPORT_CODE).alias("code"), latitude.alias("lat"),
                        longitude.alias("lon"))
        .where((F.col("code") != "") & _is_finite(F.col("lat")) & _is_finite(F.col("lon")))
    )
    smallest = F.min(F.struct("lat", "lon")).alias("coordinates")
    return known.groupBy("code").agg(smallest).select("code", "coordinates.lat", "coordinates.lon")


def prepare_flights(flights: DataFrame, coordinates: DataFrame) -> DataFrame:
    """One row per input row: its invalid kind (null when valid) and the derived fields."""
    flights = strip_byte_order_mark(flights)
    require_columns(flights, FLIGHT_COLUMNS, "flights")
    # Three selects, so that each regex and parse runs once per row: Spark does not merge a
    # projection into the next when that would repeat an expensive expression.
    parsed = flights.select(
        F.monotonically_increasing_id().alias(_ROW_KEY),
        "legId",
        "startingAirport",
        "destinationAirport",
        "travelDuration",
        "segmentsArrivalAirportCode",
        parse_number(F.col("totalFare")).alias("fare_parsed"),
        _matches(F.col("travelDuration"), DURATION_REGEX).alias("duration_ok"),
        F.col("totalTravelDistance"),
    )
    kinds = parsed.withColumn(
        _INVALID_KIND, invalid_kind(F.col("fare_parsed"), F.col("duration_ok"))
    )
    valid = F.col(_INVALID_KIND).isNull()
    segments = F.split(F.col("segmentsArrivalAirportCode"), _SEGMENT_SEPARATOR_REGEX, -1)
    classified = kinds.select(
        _ROW_KEY,
        _INVALID_KIND,
        "legId",
        "startingAirport",
        "destinationAirport",
        "travelDuration",
        F.when(valid, F.col("fare_parsed")).alias(_FARE),
        F.when(valid, _duration_minutes_of_valid(F.col("travelDuration")))
        .alias(_DURATION_MINUTES),
        F.when(valid, segments).alias("segments"),
        F.when(valid, _positive_finite(parse_number(F.col("totalTravelDistance"))))
        .alias(_GIVEN_MILES),
    ).withColumn(_STOPOVER_COUNT, F.when(valid, F.size("segments") - 1))
    # Only Q1/Q3 print stopovers and only Q2 reads the chain: keep the cache small.
    q1_row = F.col(_STOPOVER_COUNT) >= Q1_STOPOVER_COUNT_MIN
    chain = F.concat(F.array(F.col("startingAirport")), F.col("segments"))
    return _with_airports(classified.select(
        "*",
        F.when(q1_row, stopovers(F.col("segments"))).alias("stopovers"),
        F.when(valid & F.col(_GIVEN_MILES).isNull(), chain).alias(_CHAIN),
    ), coordinates)


def _with_airports(classified: DataFrame, coordinates: DataFrame) -> DataFrame:
    """The prepared rows: `classified` (its query fields and the row key) joined with the
    airports of both ends."""
    origin = _coordinates_as(coordinates, "origin")
    destination = _coordinates_as(coordinates, "destination")
    joined = (
        classified.join(origin, F.col("startingAirport") == F.col("origin_code"), "left")
        .join(destination, F.col("destinationAirport") == F.col("destination_code"), "left")
    )
    endpoints_known = F.col("origin_lat").isNotNull() & F.col("destination_lat").isNotNull()
    return joined.select(
        _ROW_KEY,
        _INVALID_KIND,
        "legId",
        F.concat_ws("-", "startingAirport", "destinationAirport").alias("route"),
        "travelDuration",
        _FARE,
        _DURATION_MINUTES,
        _STOPOVER_COUNT,
        "stopovers",
        haversine_miles("origin", "destination").alias(_DIRECT_MILES),
        endpoints_known.alias(_ENDPOINTS_KNOWN),
        _GIVEN_MILES,
        F.when(endpoints_known, F.col(_CHAIN)).alias(_CHAIN),
    )


def _coordinates_as(coordinates: DataFrame, prefix: str) -> DataFrame:
    renamed = coordinates.select(
        F.col("code").alias(f"{prefix}_code"),
        F.col("lat").alias(f"{prefix}_lat"),
        F.col("lon").alias(f"{prefix}_lon"),
    )
    return F.broadcast(renamed)


def require_columns(frame: DataFrame, names: tuple[str, ...], what: str) -> None:
    missing = [name for name in names if name not in frame.columns]
    if missing:
        raise MissingColumnsError(f"{what} frame lacks columns {missing}; has {frame.columns}")


# --- row expressions --------------------------------------------------------------------------


def invalid_kind(fare: Column, duration_ok: Column) -> Column:
    """The first validity rule of QUERIES.md that the row fails, or null for a valid row.

    `fare` is `parse_number(totalFare)`, `duration_ok` whether travelDuration matches
    DURATION_REGEX (never null); the other rules read the row's columns.
    """
    airports_ok = _matches(F.col("startingAirport"), AIRPORT_CODE_REGEX) & _matches(
        F.col("destinationAirport"), AIRPORT_CODE_REGEX
    )
    return (
        F.when(_is_empty(F.col("legId")), F.lit("empty_leg_id"))
        .when(~airports_ok, F.lit("bad_airport_code"))
        .when(~duration_ok, F.lit("bad_duration"))
        .when(~F.coalesce(_is_finite(fare) & (fare >= 0), F.lit(False)), F.lit("bad_fare"))
        .when(_is_empty(F.col("segmentsArrivalAirportCode")), F.lit("empty_segments"))
    )


def parse_number(text: Column) -> Column:
    """The double of a plain decimal literal (infinity if it overflows); null for anything else.

    Never raises, whatever the text."""
    return F.when(_matches(text, NUMBER_REGEX), text.try_cast("double"))


def duration_minutes(text: Column) -> Column:
    """Whole minutes of an ISO-8601 duration matching DURATION_REGEX; null otherwise."""
    return F.when(_matches(text, DURATION_REGEX), _duration_minutes_of_valid(text))


def _duration_minutes_of_valid(text: Column) -> Column:
    """Whole minutes of a text that matches DURATION_REGEX (anything for any other text).

    Once the regex has vouched for the text, plain string splits pick the numbers out: four
    `regexp_extract` calls cost about four times as much per row.
    """
    after_p = F.substring(text, 2, F.length(text))
    has_time = after_p.contains("T")
    date = F.when(has_time, F.substring_index(after_p, "T", 1)).otherwise(after_p)
    time = F.when(has_time, F.substring_index(after_p, "T", -1)).otherwise(F.lit(""))
    after_hours = F.substring_index(time, "H", -1)  # the whole text when there is no "H"
    after_minutes = F.substring_index(after_hours, "M", -1)
    minutes = (
        _designated(date, "D") * MINUTES_PER_DAY
        + _designated(time, "H") * MINUTES_PER_HOUR
        + _designated(after_hours, "M")
        + F.floor(_designated(after_minutes, "S") / SECONDS_PER_MINUTE)
    )
    return minutes.cast("bigint")


def _designated(part: Column, designator: str) -> Column:
    """The number before `designator` in a validated duration part ("12H5M", "H" -> 12), or 0."""
    number = F.substring_index(part, designator, 1).try_cast("bigint")
    return F.when(part.contains(designator), number).otherwise(F.lit(0))


def stopovers(segments: Column) -> Column:
    """The arrival airports of every segment but the last, joined with `||`."""
    return F.array_join(F.slice(segments, 1, F.size(segments) - 1), SEGMENT_SEPARATOR)


def haversine_miles(start: str, end: str) -> Column:
    """Great-circle miles between `<start>_lat/_lon` and `<end>_lat/_lon` (null if unknown)."""
    return _haversine(
        F.col(f"{start}_lat"), F.col(f"{start}_lon"), F.col(f"{end}_lat"), F.col(f"{end}_lon")
    )


def _haversine(lat1: Column, lon1: Column, lat2: Column, lon2: Column) -> Column:
    half_dlat = F.radians(lat2 - lat1) / 2
    half_dlon = F.radians(lon2 - lon1) / 2
    a = F.sin(half_dlat) * F.sin(half_dlat) + F.cos(F.radians(lat1)) * F.cos(
        F.radians(lat2)
    ) * F.sin(half_dlon) * F.sin(half_dlon)
    # Rounding can push sqrt(a) a hair above 1 for antipodes; asin would give NaN. (Not
    # `least`: it skips nulls, and an unknown airport must stay null.)
    root = F.sqrt(a)
    return 2 * EARTH_RADIUS_MILES * F.asin(F.when(root > 1, F.lit(1.0)).otherwise(root))


def _matches(text: Column, regex: str) -> Column:
    """True/False, never null: a null text does not match."""
    return F.coalesce(text.rlike(regex), F.lit(False))


def _is_empty(text: Column) -> Column:
    return text.isNull() | (text == "")


def _is_finite(number: Column) -> Column:
    return number.isNotNull() & ~F.isnan(number) & (F.abs(number) < F.lit(float("inf")))


def _positive_finite(number: Column) -> Column:
    return F.when(_is_finite(number) & (number > 0), number)


# --- counts -----------------------------------------------------------------------------------


def count_rows(prepared: DataFrame) -> dict:
    """One aggregation job: row counts, invalid counts by kind, Q2 skips and the mean fare."""
    kind = F.col(_INVALID_KIND)
    valid = kind.isNull()
    row = prepared.agg(
        F.count(F.lit(1)).alias("rows"),
        F.count_if(valid).alias("valid_rows"),
        *[F.count_if(kind == name).alias(name) for name in INVALID_KINDS],
        F.count_if(valid & ~F.col(_ENDPOINTS_KNOWN)).alias("q2_skipped"),
        F.avg(F.when(valid, F.col(_FARE))).alias("mean_fare"),
    ).first()
    assert row is not None, "a global aggregation yields one row"
    return row.asDict()


# --- queries ----------------------------------------------------------------------------------


def valid_rows(prepared: DataFrame) -> DataFrame:
    return prepared.where(F.col(_INVALID_KIND).isNull())


def q1(prepared: DataFrame) -> DataFrame:
    """`legId,route,totalFare,stopovers` of every valid row with at least 3 stopovers."""
    rows = valid_rows(prepared).where(F.col(_STOPOVER_COUNT) >= Q1_STOPOVER_COUNT_MIN)
    return rows.select(*Q1_COLUMNS)


def q2(prepared: DataFrame, coordinates: DataFrame) -> DataFrame:
    """`legId,route,totalDistance` of every row flown over 4 times its direct distance."""
    known = valid_rows(prepared).where(F.col(_ENDPOINTS_KNOWN))
    given = known.where(F.col(_GIVEN_MILES).isNotNull()).select(
        "legId", "route", _DIRECT_MILES, F.col(_GIVEN_MILES).alias(_TOTAL_DISTANCE)
    )
    candidates = given.unionByName(_distance_along_legs(known, coordinates))
    detour = F.col(_TOTAL_DISTANCE) > Q2_DETOUR_FACTOR * F.col(_DIRECT_MILES)
    return candidates.where(detour).select(*Q2_COLUMNS)


def _distance_along_legs(known: DataFrame, coordinates: DataFrame) -> DataFrame:
    """`legId, route, direct_miles, totalDistance` summed over the chain's legs, in order.

    A leg with an unknown airport makes the sum null, so the row drops out of Q2.
    """
    chain = F.col(_CHAIN)
    hops = F.size(chain) - 1
    legs = F.zip_with(
        F.slice(chain, 1, hops),
        F.slice(chain, 2, hops),
        lambda src, dst: F.struct(src.alias("src"), dst.alias("dst")),
    )
    exploded = known.where(chain.isNotNull()).select(
        _ROW_KEY, "legId", "route", _DIRECT_MILES, F.posexplode(legs).alias("pos", "leg")
    )
    src = _coordinates_as(coordinates, "src")
    dst = _coordinates_as(coordinates, "dst")
    located = exploded.join(src, F.col("leg.src") == F.col("src_code"), "left").join(
        dst, F.col("leg.dst") == F.col("dst_code"), "left"
    )
    leg_miles = F.struct(F.col("pos"), haversine_miles("src", "dst").alias("miles"))
    per_row = located.groupBy(_ROW_KEY, "legId", "route", _DIRECT_MILES).agg(
        F.sort_array(F.collect_list(leg_miles)).alias("legs")
    )
    total = F.aggregate("legs", F.lit(0.0), lambda acc, leg: acc + leg["miles"])
    return per_row.select("legId", "route", _DIRECT_MILES, total.alias(_TOTAL_DISTANCE))


def q3(prepared: DataFrame) -> DataFrame:
    """`legId,route,stopovers,travelDuration`: per route, the 2 shortest Q1 rows."""
    rows = valid_rows(prepared).where(F.col(_STOPOVER_COUNT) >= Q1_STOPOVER_COUNT_MIN)
    return shortest_per_route(rows, "route").select(*Q3_COLUMNS)


def shortest_per_route(q1_rows: DataFrame, route_key: str) -> DataFrame:
    """Q3's rows of `q1_rows`: per `route_key`, the `Q3_ROWS_PER_ROUTE_MAX` shortest, ties
    broken by legId, fare, stopovers, then travelDuration."""
    order = Window.partitionBy(route_key).orderBy(
        _DURATION_MINUTES, "legId", _FARE, "stopovers", "travelDuration"
    )
    ranked = q1_rows.withColumn("rank", F.row_number().over(order))
    return ranked.where(F.col("rank") <= Q3_ROWS_PER_ROUTE_MAX)


def q4(prepared: DataFrame, mean_fare: float | None) -> DataFrame:
    """`route,avgFare,maxFare` over the valid rows whose fare is above the mean of all."""
    above = rows_above_mean(valid_rows(prepared), mean_fare)
    return fares_by_route(above, "route").select(*Q4_COLUMNS)


def rows_above_mean(valid: DataFrame, mean_fare: float | None) -> DataFrame:
    """The rows of `valid` whose fare is above `mean_fare` (none without a mean)."""
    if mean_fare is None:
        return valid.where(F.lit(False))
    # The mean as a column of a broadcast one-row frame, not a literal: Spark writes a
    # literal into the generated Java, so every session's own mean would compile its
    # Q4 stage anew (Janino, then the JIT: ~16 KB of code per session); a column keeps
    # the code the same from session to session, and Spark's code cache serves it.
    threshold = valid.sparkSession.createDataFrame([(mean_fare,)], _Q4_MEAN_SCHEMA)
    return valid.crossJoin(F.broadcast(threshold)).where(F.col(_FARE) > F.col(_Q4_MEAN))


def fares_by_route(rows: DataFrame, route_key: str) -> DataFrame:
    """`route_key, avgFare, maxFare` of `rows`."""
    return rows.groupBy(route_key).agg(F.avg(_FARE).alias("avgFare"),
                                       F.max(_FARE).alias("maxFare"))
