"""The names and numbers of docs/queries.md the query service's rules share: the input columns read,
the validity rules' names, the queries' thresholds and output columns, the regexes (Java's,
as Spark runs them; spark/rules/flight_fields.py has their RE2 forms), and the columns of the
prepared rows the queries read (spark/rules/flight_fields.py derives them on the workers,
spark/rules/query_frames.py aggregates them).

The decisions docs/queries.md leaves open are listed in spark/rules/query_frames.py's docstring.
Constants only; no imports of Spark.
"""

from __future__ import annotations

from common.flights.input_columns import (  # noqa: F401 (the rules' names for them)
    AIRPORT_CODE,
    AIRPORT_COLUMNS,
    AIRPORT_LATITUDE,
    AIRPORT_LONGITUDE,
    FLIGHT_COLUMNS,
)
from common.flights.result_csv import QUERY_HEADERS

# The airports file starts with a byte-order mark; a reader other than ours may keep it.
BYTE_ORDER_MARK = "\ufeff"

# Validity rules in docs/queries.md order; a row counts under the first one it fails.
INVALID_KINDS = ("empty_leg_id", "bad_airport_code", "bad_duration", "bad_fare", "empty_segments")

EARTH_RADIUS_MILES = 3958.8
MINUTES_PER_DAY, MINUTES_PER_HOUR, SECONDS_PER_MINUTE = 1440, 60, 60
Q1_STOPOVER_COUNT_MIN = 3
Q2_DETOUR_FACTOR = 4
Q3_ROWS_PER_ROUTE_MAX = 2
duration_component_digits_max = 9  # 999,999,999 days in minutes still fits a bigint

SEGMENT_SEPARATOR = "||"
# Java regexes: `\z` is the very end of the input (`$` would also match before a final "\n").
AIRPORT_CODE_REGEX = r"^[A-Z]{3}\z"
NUMBER_REGEX = r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?\z"
_N = f"([0-9]{{1,{duration_component_digits_max}}})"
DURATION_REGEX = rf"^P(?=[0-9T])(?:{_N}D)?(?:T(?=[0-9])(?:{_N}H)?(?:{_N}M)?(?:{_N}S)?)?\z"

Q1_COLUMNS, Q2_COLUMNS = QUERY_HEADERS["q1"], QUERY_HEADERS["q2"]
Q3_COLUMNS, Q4_COLUMNS = QUERY_HEADERS["q3"], QUERY_HEADERS["q4"]

# Columns of the prepared rows (one per input row) that the queries read.
INVALID_KIND = "invalid_kind"  # null when the row is valid
FARE = "totalFare"  # the parsed double; the source string column is not kept
DURATION_MINUTES = "duration_minutes"
ENDPOINTS_KNOWN = "endpoints_known"  # both airports in the airports file
STOPOVERS = "stopovers"
TOTAL_DISTANCE = "totalDistance"
