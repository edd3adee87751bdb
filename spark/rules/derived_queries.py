"""Q1-Q4 of a session job: over flights whose query fields the `kaska` source's Python workers
derived already (`spark.rules.flight_fields.DERIVED_SCHEMA`), so that Spark caches a route id,
a fare and two booleans for most rows and only filters, ranks and aggregates.

    coordinates = airport_coordinates(airports)            # one small job: the session's airports
    flights = <the kaska source, arrowTransform spark.rules.flight_fields:derive,
               arrowTransformArgument coordinates.to_json()>
    results = compute_all_derived(flights)

The rules are spark/rules/query_frames.py's (docs/queries.md): the airports are prepared by its
`prepare_airports`, Q3 ranks with its `shortest_per_route` and Q4 compares with its
`rows_above_mean`; what the workers derived is checked against the plain-Python reference by
every query suite (both paths) and row by row by a property test.

Pure planning; thread-safe as Spark's DataFrame API is.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark.rules.airport_distances import AirportCoordinates
from spark.rules.contract import Q1_COLUMNS, Q2_COLUMNS, Q3_COLUMNS, Q4_COLUMNS
from spark.rules.flight_fields import DERIVED_SCHEMA, FARE, ROUTE_ID, STOPOVERS, TOTAL_DISTANCE
from spark.rules.query_frames import (
    QueryResults,
    count_rows,
    fares_by_route,
    prepare_airports,
    require_columns,
    rows_above_mean,
    shortest_per_route,
    valid_rows,
)
from spark.rules.route_id import route_text

DERIVED_COLUMNS = tuple(DERIVED_SCHEMA.names)


def airport_coordinates(airports: DataFrame) -> AirportCoordinates:
    """The session's known airports, collected to the driver (one row per code: 7,886 in the
    real airports file, ~280 KB as JSON; nothing bounds a client's file)."""
    rows = prepare_airports(airports).collect()
    return AirportCoordinates({row["code"]: (row["lat"], row["lon"]) for row in rows})


def compute_all_derived(derived: DataFrame) -> QueryResults:
    """Every query over one client's derived flights, sharing one cached pass."""
    require_columns(derived, DERIVED_COLUMNS, "derived flights")
    prepared = derived.cache()
    counts = count_rows(prepared)
    frames = {"q1": q1(prepared), "q2": q2(prepared), "q3": q3(prepared),
              "q4": q4(prepared, counts["mean_fare"])}
    return QueryResults.of(counts, frames, cached=(prepared,))


def _route() -> F.Column:
    return route_text(F.col(ROUTE_ID)).alias("route")


def _q1_rows(prepared: DataFrame) -> DataFrame:
    return prepared.where(F.col(STOPOVERS).isNotNull())  # set on the Q1 rows only


def q1(prepared: DataFrame) -> DataFrame:
    return _q1_rows(prepared).select("legId", _route(), FARE, STOPOVERS).select(*Q1_COLUMNS)


def q2(prepared: DataFrame) -> DataFrame:
    rows = prepared.where(F.col(TOTAL_DISTANCE).isNotNull())  # set on the Q2 rows only
    return rows.select("legId", _route(), TOTAL_DISTANCE).select(*Q2_COLUMNS)


def q3(prepared: DataFrame) -> DataFrame:
    ranked = shortest_per_route(_q1_rows(prepared), ROUTE_ID)
    return ranked.select("legId", _route(), STOPOVERS, "travelDuration").select(*Q3_COLUMNS)


def q4(prepared: DataFrame, mean_fare: float | None) -> DataFrame:
    by_route = fares_by_route(rows_above_mean(valid_rows(prepared), mean_fare), ROUTE_ID)
    return by_route.select(_route(), "avgFare", "maxFare").select(*Q4_COLUMNS)
