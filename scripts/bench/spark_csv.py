"""Q1-Q4 computed by Spark SQL straight from the two CSV files: the benchmarks' Spark path
(scripts/bench/queries.py, the pipeline benchmark's in-process mode) and the second path the
query rules' tests hold the service's own to. The query service never runs it: a session job
reads rows whose query fields the `kaska` source's workers derived (spark/rules/).

Readers. Both frames hold every CSV column as a string column named by its header (docs/queries.md
"Inputs"):
- flights: the Kaggle `itineraries.csv` layout, `,`-separated, RFC-4180 quoting (a field may be
  quoted, a quote inside a quoted field is doubled), one record per line;
- airports: the "Airports Opendatahub" layout, `;`-separated, UTF-8 with a byte-order mark,
  `\\N` for null.
Spark's CSV reader leaves an empty field as null; the queries treat null and "" alike.

Plan (`compute_all`): `prepare_flights` classifies every row (the first validity rule it fails,
or valid), derives route / stopovers / duration / direct distance through two broadcast joins
with the airports, and is cached; one aggregation over the cache yields the invalid counts, the
rows Q2 skips and Q4's mean; the four queries then read the cache. Only the ~6 % of rows
without a usable `totalTravelDistance` are exploded into legs for Q2, joined with the
broadcast airports and summed back in chain order. The rules and their open decisions are
spark/rules/query_frames.py's, whose helpers this path shares.

Pure planning; thread-safe as Spark's DataFrame API is.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from spark.rules.contract import (
    AIRPORT_CODE_REGEX,
    DURATION_MINUTES,
    DURATION_REGEX,
    EARTH_RADIUS_MILES,
    ENDPOINTS_KNOWN,
    FARE,
    FLIGHT_COLUMNS,
    INVALID_KIND,
    MINUTES_PER_DAY,
    MINUTES_PER_HOUR,
    Q1_COLUMNS,
    Q1_STOPOVER_COUNT_MIN,
    Q2_COLUMNS,
    Q2_DETOUR_FACTOR,
    Q3_COLUMNS,
    Q4_COLUMNS,
    SECONDS_PER_MINUTE,
    SEGMENT_SEPARATOR,
    STOPOVERS,
    TOTAL_DISTANCE,
)
from spark.rules.query_frames import (
    QueryResults,
    count_rows,
    fares_by_route,
    is_finite,
    matches,
    parse_number,
    prepare_airports,
    require_columns,
    rows_above_mean,
    shortest_per_route,
    strip_byte_order_mark,
    valid_rows,
)

_SEGMENT_SEPARATOR_REGEX = r"\|\|"
# Columns of the prepared (cached) frame besides those spark/rules/contract.py names.
_ROW_KEY = "row_key"
_STOPOVER_COUNT = "stopover_count"
_DIRECT_MILES = "direct_miles"
_GIVEN_MILES = "given_miles"
_CHAIN = "chain"  # starting airport + every segment's arrival airport; only for rows Q2 needs

# RFC-4180: `"` quotes a field and a doubled `"` inside it is one quote. multiLine stays off: the
# real files never break a record over lines, and line splitting lets Spark read one file with
# several tasks.
_RFC4180_OPTIONS = {
    "header": "true",
    "inferSchema": "false",
    "quote": '"',
    "escape": '"',
    "multiLine": "false",
    "mode": "PERMISSIVE",
    "encoding": "UTF-8",
}


def read_flights_csv(spark: SparkSession, path: str) -> DataFrame:
    """The flights file as string columns named by its header."""
    frame = spark.read.options(**_RFC4180_OPTIONS).option("sep", ",").csv(path)
    return strip_byte_order_mark(frame)


def read_airports_csv(spark: SparkSession, path: str) -> DataFrame:
    """The airports file as string columns named by its header; `\\N` fields are null."""
    frame = (
        spark.read.options(**_RFC4180_OPTIONS)
        .option("sep", ";")
        .option("nullValue", "\\N")
        .csv(path)
    )
    return strip_byte_order_mark(frame)


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


# --- inputs ------------------------------------------------------------------------------------


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
        matches(F.col("travelDuration"), DURATION_REGEX).alias("duration_ok"),
        F.col("totalTravelDistance"),
    )
    kinds = parsed.withColumn(
        INVALID_KIND, invalid_kind(F.col("fare_parsed"), F.col("duration_ok"))
    )
    valid = F.col(INVALID_KIND).isNull()
    segments = F.split(F.col("segmentsArrivalAirportCode"), _SEGMENT_SEPARATOR_REGEX, -1)
    classified = kinds.select(
        _ROW_KEY,
        INVALID_KIND,
        "legId",
        "startingAirport",
        "destinationAirport",
        "travelDuration",
        F.when(valid, F.col("fare_parsed")).alias(FARE),
        F.when(valid, _duration_minutes_of_valid(F.col("travelDuration")))
        .alias(DURATION_MINUTES),
        F.when(valid, segments).alias("segments"),
        F.when(valid, _positive_finite(parse_number(F.col("totalTravelDistance"))))
        .alias(_GIVEN_MILES),
    ).withColumn(_STOPOVER_COUNT, F.when(valid, F.size("segments") - 1))
    # Only Q1/Q3 print stopovers and only Q2 reads the chain: keep the cache small.
    q1_row = F.col(_STOPOVER_COUNT) >= Q1_STOPOVER_COUNT_MIN
    chain = F.concat(F.array(F.col("startingAirport")), F.col("segments"))
    return _with_airports(classified.select(
        "*",
        F.when(q1_row, stopovers(F.col("segments"))).alias(STOPOVERS),
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
        INVALID_KIND,
        "legId",
        F.concat_ws("-", "startingAirport", "destinationAirport").alias("route"),
        "travelDuration",
        FARE,
        DURATION_MINUTES,
        _STOPOVER_COUNT,
        STOPOVERS,
        haversine_miles("origin", "destination").alias(_DIRECT_MILES),
        endpoints_known.alias(ENDPOINTS_KNOWN),
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


# --- row expressions --------------------------------------------------------------------------


def invalid_kind(fare: Column, duration_ok: Column) -> Column:
    """The first validity rule of docs/queries.md that the row fails, or null for a valid row.

    `fare` is `parse_number(totalFare)`, `duration_ok` whether travelDuration matches
    DURATION_REGEX (never null); the other rules read the row's columns.
    """
    airports_ok = matches(F.col("startingAirport"), AIRPORT_CODE_REGEX) & matches(
        F.col("destinationAirport"), AIRPORT_CODE_REGEX
    )
    return (
        F.when(_is_empty(F.col("legId")), F.lit("empty_leg_id"))
        .when(~airports_ok, F.lit("bad_airport_code"))
        .when(~duration_ok, F.lit("bad_duration"))
        .when(~F.coalesce(is_finite(fare) & (fare >= 0), F.lit(False)), F.lit("bad_fare"))
        .when(_is_empty(F.col("segmentsArrivalAirportCode")), F.lit("empty_segments"))
    )


def duration_minutes(text: Column) -> Column:
    """Whole minutes of an ISO-8601 duration matching DURATION_REGEX; null otherwise."""
    return F.when(matches(text, DURATION_REGEX), _duration_minutes_of_valid(text))


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


def _is_empty(text: Column) -> Column:
    return text.isNull() | (text == "")


def _positive_finite(number: Column) -> Column:
    return F.when(is_finite(number) & (number > 0), number)


# --- queries ----------------------------------------------------------------------------------


def q1(prepared: DataFrame) -> DataFrame:
    """`legId,route,totalFare,stopovers` of every valid row with at least 3 stopovers."""
    rows = valid_rows(prepared).where(F.col(_STOPOVER_COUNT) >= Q1_STOPOVER_COUNT_MIN)
    return rows.select(*Q1_COLUMNS)


def q2(prepared: DataFrame, coordinates: DataFrame) -> DataFrame:
    """`legId,route,totalDistance` of every row flown over 4 times its direct distance."""
    known = valid_rows(prepared).where(F.col(ENDPOINTS_KNOWN))
    given = known.where(F.col(_GIVEN_MILES).isNotNull()).select(
        "legId", "route", _DIRECT_MILES, F.col(_GIVEN_MILES).alias(TOTAL_DISTANCE)
    )
    candidates = given.unionByName(_distance_along_legs(known, coordinates))
    detour = F.col(TOTAL_DISTANCE) > Q2_DETOUR_FACTOR * F.col(_DIRECT_MILES)
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
    return per_row.select("legId", "route", _DIRECT_MILES, total.alias(TOTAL_DISTANCE))


def q3(prepared: DataFrame) -> DataFrame:
    """`legId,route,stopovers,travelDuration`: per route, the 2 shortest Q1 rows."""
    rows = valid_rows(prepared).where(F.col(_STOPOVER_COUNT) >= Q1_STOPOVER_COUNT_MIN)
    return shortest_per_route(rows, "route").select(*Q3_COLUMNS)


def q4(prepared: DataFrame, mean_fare: float | None) -> DataFrame:
    """`route,avgFare,maxFare` over the valid rows whose fare is above the mean of all."""
    above = rows_above_mean(valid_rows(prepared), mean_fare)
    return fares_by_route(above, "route").select(*Q4_COLUMNS)
