"""Q1-Q4 of docs/queries.md computed by DuckDB in one process: the reference for inputs too large
for oracle/reference.py, and the pipeline benchmark's baseline (`python -m scripts.bench_duckdb`,
scripts/bench_duckdb.py: its flags and output). DuckDB is a dev/bench extra, not a runtime
dependency: only this module of the oracle imports it.

`duckdb_queries` is the whole computation. Every input column is read as text and every rule
of docs/queries.md is written in SQL, with the decisions oracle/reference.py takes where the
contract leaves them open (and the query service shares):
- numbers are plain decimal literals (`NUMBER_REGEX`), then DuckDB's cast to DOUBLE;
- `travelDuration` is `P[nD][T[nH][nM][nS]]`, at least one component, each of at most 9
  digits; seconds count in whole minutes, floored;
- an airport is known when its code is non-empty and both coordinates are finite numbers; a
  code listed twice keeps its smallest (latitude, longitude);
- Q1's `totalFare` is the parsed double;
- Q3 breaks ties by duration, legId, totalFare, then stopovers, then travelDuration.
DuckDB's regexes are RE2: `$` is the very end of the text (Java's `\\z`), so a value with a
trailing newline matches none of them.
Threads: the caller's (DuckDB's own `threads` aside); each run is a fresh in-memory database.
"""

from __future__ import annotations

import csv
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from common.flights.result_csv import QUERY_HEADERS, csv_text, format_row

# The columns, the validity rules' names and the earth's radius are the plain-Python
# reference's: DuckDB answers the same queries over the same inputs.
from oracle.reference import AIRPORT_COLUMNS, EARTH_RADIUS_MILES, FLIGHT_COLUMNS, INVALID_KINDS

QUERIES = ("q1", "q2", "q3", "q4")

DEFAULT_THREADS = 2
DEFAULT_REPEATS = 1

NUMBER_REGEX = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
AIRPORT_CODE_REGEX = "[A-Z]{3}"
# RE2 has no look-ahead (Spark's regex uses one to demand a component): this one also takes
# "P" and a time part "T" with nothing after it, which the `duration_ok` macro rules out.
_N = "([0-9]{1,9})"
DURATION_REGEX = rf"P(?:{_N}D)?(?:T(?:{_N}H)?(?:{_N}M)?(?:{_N}S)?)?"


class BenchInputError(ValueError):
    """An input of the benchmark cannot be used as docs/queries.md describes."""


class MissingInputFileError(BenchInputError):
    """A flights or airports file does not exist."""


class MissingColumnsError(BenchInputError):
    """An input file's header lacks a column the queries read (columns are found by name)."""


class ArgumentError(BenchInputError):
    """A numeric argument is outside its domain (threads or repeats below 1)."""


@dataclass
class DuckdbRun:
    """One load + Q1-Q4: the result rows, the counts and where the time went."""

    results: dict[str, list[tuple]]  # q1..q4 -> rows in docs/queries.md column order
    rows: int
    valid_rows: int
    invalid_counts: dict[str, int]  # every kind of INVALID_KINDS, zeros included
    q2_skipped: int  # valid rows whose origin or destination is not a known airport
    mean_fare: float | None  # Q4's threshold; None without valid rows
    load_seconds: float
    query_seconds: float
    write_seconds: float = 0.0
    total_seconds: float = field(init=False)

    def __post_init__(self) -> None:
        self.total_seconds = self.load_seconds + self.query_seconds + self.write_seconds

    def result_counts(self) -> dict[str, int]:
        return {query: len(rows) for query, rows in self.results.items()}


# --- loading ----------------------------------------------------------------------------------


def _header(path: Path, delimiter: str) -> list[str]:
    """The header fields of a CSV file (a byte-order mark dropped), [] for an empty file."""
    if not path.is_file():
        raise MissingInputFileError(f"no such file: {path}")
    with open(path, newline="", encoding="utf-8-sig") as handle:
        return next(csv.reader(handle, delimiter=delimiter), [])


def _column_positions(path: Path, delimiter: str,
                      names: tuple[str, ...]) -> tuple[dict[str, int], int]:
    """Where each wanted column is, and the column count; a name listed twice is its last
    one, as with csv.DictReader."""
    header = _header(path, delimiter)
    positions = {name: index for index, name in enumerate(header)}
    missing = [name for name in names if name not in positions]
    if missing:
        raise MissingColumnsError(f"{path} lacks columns {missing}; its header is {header}")
    return {name: positions[name] for name in names}, len(header)


def _sql_text(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _read_csv(path: Path, width: int, delimiter: str, parallel: bool, null: str = "") -> str:
    """A read_csv call for every column as VARCHAR, named c0, c1, ... by position.

    The columns are given, not sniffed: no guess can differ between files. RFC-4180 quoting;
    a short row is padded with nulls and a long one cut (strict_mode off), like csv.DictReader
    and Spark's PERMISSIVE mode; empty lines are skipped.
    """
    columns = ", ".join(f"'c{index}': 'VARCHAR'" for index in range(width))
    return (
        f"read_csv({_sql_text(str(path))}, header = true, auto_detect = false, "
        f"columns = {{{columns}}}, delim = {_sql_text(delimiter)}, quote = '\"', escape = '\"', "
        f"nullstr = {_sql_text(null)}, null_padding = true, strict_mode = false, "
        f"parallel = {str(parallel).lower()})"
    )


def _create_from_csv(con, table: str, path: Path, delimiter: str, names: tuple[str, ...],
                     null: str = "") -> None:
    positions, width = _column_positions(path, delimiter, names)
    select = ", ".join(f'c{index} AS "{name}"' for name, index in positions.items())

    def create(parallel: bool) -> None:
        source = _read_csv(path, width, delimiter, parallel, null)
        con.execute(f"CREATE OR REPLACE TABLE {table} AS SELECT {select} FROM {source}")

    try:
        create(parallel=True)
    except duckdb.Error as error:
        # DuckDB's parallel scanner cannot pad short rows in a file with a line break inside a
        # quoted field; the real files have none, so only such a file pays for one thread.
        if "quoted new lines" not in str(error):
            raise
        create(parallel=False)


def load(con, flights_csv: Path, airports_csv: Path) -> None:
    """Tables `flights` and `airports_raw`: the columns docs/queries.md uses, as text."""
    _create_from_csv(con, "flights", flights_csv, ",", FLIGHT_COLUMNS)
    _create_from_csv(con, "airports_raw", airports_csv, ";", AIRPORT_COLUMNS, null="\\N")


# --- queries ----------------------------------------------------------------------------------

_MACROS = f"""
CREATE OR REPLACE MACRO parse_number(text) AS
    CASE WHEN regexp_full_match(text, '{NUMBER_REGEX}') THEN TRY_CAST(text AS DOUBLE) END;
CREATE OR REPLACE MACRO is_code(text) AS coalesce(regexp_full_match(text, '{AIRPORT_CODE_REGEX}'),
    false);
CREATE OR REPLACE MACRO is_empty(text) AS coalesce(text, '') = '';
CREATE OR REPLACE MACRO duration_ok(text) AS coalesce(regexp_full_match(text, '{DURATION_REGEX}')
    AND text <> 'P' AND NOT ends_with(text, 'T'), false);
CREATE OR REPLACE MACRO component(text) AS CAST(coalesce(nullif(text, ''), '0') AS BIGINT);
-- Whole minutes of a text that duration_ok accepts: there each designator appears at most
-- once, right after its number (D only before T; H, M, S only after it).
CREATE OR REPLACE MACRO duration_minutes(text) AS
    component(regexp_extract(text, '([0-9]+)D', 1)) * 1440
    + component(regexp_extract(text, '([0-9]+)H', 1)) * 60
    + component(regexp_extract(text, '([0-9]+)M', 1))
    + component(regexp_extract(text, '([0-9]+)S', 1)) // 60;
"""



def _haversine(lat1: str, lon1: str, lat2: str, lon2: str) -> str:
    """SQL for the great-circle miles between two points in degrees (null if one is null).

    Inline SQL, not a macro with a subquery, which would run once per row. The bound keeps
    rounding from pushing sqrt(a) above 1 for antipodes (asin would give NaN); not least(),
    which skips nulls, when an unknown airport must keep the distance null.
    """
    a = (
        f"(sin((radians({lat2}) - radians({lat1})) / 2) ^ 2 + cos(radians({lat1})) "
        f"* cos(radians({lat2})) * sin((radians({lon2}) - radians({lon1})) / 2) ^ 2)"
    )
    return (f"2 * {EARTH_RADIUS_MILES} * asin(CASE WHEN sqrt({a}) > 1 THEN 1.0 "
            f"ELSE sqrt({a}) END)")


_COORDINATES = """
CREATE OR REPLACE TEMP TABLE coordinates AS
WITH parsed AS (
    SELECT "Airport Code" AS code, parse_number("Latitude") AS lat,
           parse_number("Longitude") AS lon
    FROM airports_raw
)
SELECT code, lat, lon FROM parsed
WHERE code <> '' AND isfinite(lat) AND isfinite(lon)
QUALIFY row_number() OVER (PARTITION BY code ORDER BY lat, lon) = 1
"""

# One row per input row: its invalid kind (null when valid) and the fields the queries need.
# Cheap fields are computed for every row (guarded casts make that harmless for invalid rows;
# every query reads valid rows only). The costly ones sit in CASE branches, which DuckDB runs
# only on the rows that take them: the minutes and stopovers for Q1's rows (~0.3 %), the
# segment list `chain` for the rows whose Q2 distance has to come from the legs (~6 %).
# stopover_count counts the `||` separators, as many as string_split would cut at.
_PREPARED = f"""
CREATE OR REPLACE TEMP TABLE prepared AS
WITH classified AS (
    SELECT rowid AS row_key, *, parse_number("totalFare") AS fare, CASE
        WHEN is_empty("legId") THEN 'empty_leg_id'
        WHEN NOT (is_code("startingAirport") AND is_code("destinationAirport"))
            THEN 'bad_airport_code'
        WHEN NOT duration_ok("travelDuration") THEN 'bad_duration'
        WHEN NOT coalesce(isfinite(fare) AND fare >= 0, false) THEN 'bad_fare'
        WHEN is_empty("segmentsArrivalAirportCode") THEN 'empty_segments'
    END AS invalid_kind,
    (length("segmentsArrivalAirportCode")
        - length(replace("segmentsArrivalAirportCode", '||', ''))) // 2 AS stopover_count,
    parse_number("totalTravelDistance") AS given_parsed
    FROM flights
)
SELECT row_key, invalid_kind, "legId", "travelDuration", fare, stopover_count,
       "startingAirport" || '-' || "destinationAirport" AS route,
       CASE WHEN invalid_kind IS NULL AND stopover_count >= 3
            THEN duration_minutes("travelDuration") END AS minutes,
       CASE WHEN invalid_kind IS NULL AND stopover_count >= 3
            -- [:-2]: all but the last (DuckDB slices are inclusive, -1 is the last element)
            THEN array_to_string(string_split("segmentsArrivalAirportCode", '||')[:-2], '||')
       END AS stopovers,
       {_haversine("o.lat", "o.lon", "d.lat", "d.lon")} AS direct_miles,
       o.lat IS NOT NULL AND d.lat IS NOT NULL AS endpoints_known,
       CASE WHEN isfinite(given_parsed) AND given_parsed > 0 THEN given_parsed END AS given_miles,
       CASE WHEN invalid_kind IS NULL AND endpoints_known AND given_miles IS NULL
            THEN list_prepend("startingAirport",
                              string_split("segmentsArrivalAirportCode", '||'))
       END AS chain
FROM classified
LEFT JOIN coordinates o ON o.code = "startingAirport"
LEFT JOIN coordinates d ON d.code = "destinationAirport"
"""

_COUNTS = f"""
SELECT count(*), count(*) FILTER (invalid_kind IS NULL),
       {", ".join(f"count(*) FILTER (invalid_kind = '{kind}')" for kind in INVALID_KINDS)},
       count(*) FILTER (invalid_kind IS NULL AND NOT endpoints_known),
       favg(fare) FILTER (invalid_kind IS NULL)
FROM prepared
"""

_Q1 = """
SELECT "legId", route, fare, stopovers FROM prepared
WHERE invalid_kind IS NULL AND stopover_count >= 3
"""

# The chain's legs: the two unnests run side by side (src, dst); a leg with an unknown airport
# has null miles, and then the whole row's distance is unknown.
_Q2 = f"""
WITH legs AS (
    SELECT row_key, unnest(list_slice(chain, 1, len(chain) - 1)) AS src,
           unnest(list_slice(chain, 2, len(chain))) AS dst
    FROM prepared WHERE chain IS NOT NULL
), chained AS (
    SELECT l.row_key, sum(miles) AS miles, count(*) = count(miles) AS all_known
    FROM (SELECT row_key, {_haversine("s.lat", "s.lon", "t.lat", "t.lon")} AS miles
          FROM legs LEFT JOIN coordinates s ON s.code = legs.src
          LEFT JOIN coordinates t ON t.code = legs.dst) l
    GROUP BY l.row_key
), distances AS (
    SELECT p."legId", p.route, p.direct_miles,
           coalesce(p.given_miles, CASE WHEN c.all_known THEN c.miles END) AS total
    FROM prepared p LEFT JOIN chained c USING (row_key)
    WHERE p.invalid_kind IS NULL AND p.endpoints_known
)
SELECT "legId", route, total FROM distances WHERE total > 4 * direct_miles
"""

_Q3 = """
SELECT "legId", route, stopovers, "travelDuration" FROM prepared
WHERE invalid_kind IS NULL AND stopover_count >= 3
QUALIFY row_number() OVER (
    PARTITION BY route ORDER BY minutes, "legId", fare, stopovers, "travelDuration") <= 2
"""

# favg: compensated sums, as close to the reference's math.fsum as DuckDB gets; the mean is a
# strict threshold, so its last bits can matter.
_Q4 = """
SELECT route, favg(fare), max(fare) FROM prepared
WHERE invalid_kind IS NULL AND fare > $mean
GROUP BY route
"""


def run_queries(con) -> tuple[dict[str, list[tuple]], tuple]:
    """Q1-Q4 over the loaded tables: the rows of each query, and the counts row."""
    con.execute(_MACROS)
    con.execute(_COORDINATES)
    con.execute(_PREPARED)
    counts = con.execute(_COUNTS).fetchone()
    mean_fare = counts[-1]
    results = {
        "q1": con.execute(_Q1).fetchall(),
        "q2": con.execute(_Q2).fetchall(),
        "q3": con.execute(_Q3).fetchall(),
        "q4": con.execute(_Q4, {"mean": mean_fare}).fetchall(),
    }
    return results, counts


def write_results(results: dict[str, list[tuple]], out_dir: Path) -> None:
    """q1.csv ... q4.csv in `out_dir`, floats as Python's repr."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for query in QUERIES:
        rows = (format_row(query, row) for row in results[query])
        (out_dir / f"{query}.csv").write_text(csv_text(query, rows), encoding="utf-8")


def duckdb_queries(flights_csv: Path, airports_csv: Path, threads: int = DEFAULT_THREADS,
                   out_dir: Path | None = None) -> DuckdbRun:
    """Load both files into a fresh in-memory DuckDB and compute Q1-Q4 (docs/queries.md)."""
    if threads < 1:
        raise ArgumentError(f"threads must be >= 1, got {threads}")
    flights_csv, airports_csv = Path(flights_csv), Path(airports_csv)
    # Row order carries no meaning (docs/queries.md): DuckDB need not keep it while loading.
    config = {"threads": threads, "preserve_insertion_order": False}
    with duckdb.connect(":memory:", config=config) as con:
        started = time.perf_counter()
        load(con, flights_csv, airports_csv)
        loaded = time.perf_counter()
        results, counts = run_queries(con)
        queried = time.perf_counter()
    if out_dir is not None:
        write_results(results, Path(out_dir))
    rows, valid_rows, *kinds, q2_skipped, mean_fare = counts
    assert QUERY_HEADERS.keys() == results.keys()
    return DuckdbRun(
        results=results,
        rows=rows,
        valid_rows=valid_rows,
        invalid_counts=dict(zip(INVALID_KINDS, kinds, strict=True)),
        q2_skipped=q2_skipped,
        mean_fare=mean_fare,
        load_seconds=loaded - started,
        query_seconds=queried - loaded,
        write_seconds=time.perf_counter() - queried if out_dir is not None else 0.0,
    )


# --- command line -----------------------------------------------------------------------------


def summary(runs: list[DuckdbRun], threads: int) -> dict:
    """The JSON line: median seconds over the runs, counts from the last (all runs agree)."""
    last = runs[-1]

    def median(name: str) -> float:
        return round(statistics.median(getattr(run, name) for run in runs), 3)

    return {
        "engine": "duckdb",
        "duckdb_version": duckdb.__version__,
        "threads": threads,
        "repeats": len(runs),
        "seconds": {
            "load": median("load_seconds"),
            "queries": median("query_seconds"),
            "write": median("write_seconds"),
            "total": median("total_seconds"),
        },
        "total_seconds_each": [round(run.total_seconds, 3) for run in runs],
        "rows": last.rows,
        "valid_rows": last.valid_rows,
        "results": last.result_counts(),
        "invalid_counts": last.invalid_counts,
        "q2_skipped": last.q2_skipped,
        "mean_fare": last.mean_fare,
    }
