"""A plain-Python reading of docs/queries.md: the yardstick Spark meets.

Written from the contract's text, row by row, with the csv module and math: no Spark, no
pandas, nothing of the query service. Where the contract is silent it takes the decisions
listed in `spark/rules/query_frames.py`'s docstring (plain decimal numbers;
`P[nD][T[nH][nM][nS]]` durations with at most 9 digits per component, seconds floored to
minutes; an airport needs a non-empty code and finite coordinates, a repeated code keeps its
smallest (lat, lon); Q1's fare is the parsed float; Q3 breaks remaining ties by stopovers,
then travelDuration).

Rows are mappings from header name to text; None and "" both mean an empty field. Holds every
valid row in memory: fine up to a few million rows (oracle/duckdb_queries.py for more).
Pure functions; thread-safe.
"""

from __future__ import annotations

import csv
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

# docs/queries.md "Inputs": the columns read, found by header name.
FLIGHT_COLUMNS = ("legId", "startingAirport", "destinationAirport", "travelDuration",
                  "totalFare", "totalTravelDistance", "segmentsArrivalAirportCode")
AIRPORT_CODE, AIRPORT_LATITUDE, AIRPORT_LONGITUDE = "Airport Code", "Latitude", "Longitude"
AIRPORT_COLUMNS = (AIRPORT_CODE, AIRPORT_LATITUDE, AIRPORT_LONGITUDE)
EARTH_RADIUS_MILES = 3958.8
SEGMENT_SEPARATOR = "||"
INVALID_KINDS = ("empty_leg_id", "bad_airport_code", "bad_duration", "bad_fare", "empty_segments")
DURATION_DIGITS_MAX = 9
_ASCII_UPPER = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_ASCII_DIGITS = frozenset("0123456789")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")

Row = Mapping[str, str | None]


@dataclass
class ReferenceResults:
    q1: list[tuple] = field(default_factory=list)  # (legId, route, totalFare, stopovers)
    q2: list[tuple] = field(default_factory=list)  # (legId, route, totalDistance)
    q3: list[tuple] = field(default_factory=list)  # (legId, route, stopovers, travelDuration)
    q4: list[tuple] = field(default_factory=list)  # (route, avgFare, maxFare)
    rows: int = 0
    valid_rows: int = 0
    invalid_counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(INVALID_KINDS, 0))
    q2_skipped: int = 0
    mean_fare: float | None = None

    def by_query(self) -> dict[str, list[tuple]]:
        return {"q1": self.q1, "q2": self.q2, "q3": self.q3, "q4": self.q4}


@dataclass(frozen=True)
class _ValidRow:
    leg_id: str
    origin: str
    destination: str
    travel_duration: str
    minutes: int
    fare: float
    arrivals: list[str]
    given_distance: float | None

    @property
    def route(self) -> str:
        return f"{self.origin}-{self.destination}"

    @property
    def stopovers(self) -> str:
        return SEGMENT_SEPARATOR.join(self.arrivals[:-1])


# --- files ------------------------------------------------------------------------------------


def read_flight_rows(path: Path) -> Iterator[dict[str, str | None]]:
    with open(path, newline="", encoding="utf-8-sig") as handle:
        yield from csv.DictReader(handle)


def read_airport_rows(path: Path) -> Iterator[dict[str, str | None]]:
    with open(path, newline="", encoding="utf-8-sig") as handle:
        for row in csv.DictReader(handle, delimiter=";"):
            yield {name: (None if value == "\\N" else value) for name, value in row.items()}


def compute_files(flights_path: Path, airports_path: Path) -> ReferenceResults:
    airports = airport_coordinates(read_airport_rows(airports_path))
    return compute(read_flight_rows(flights_path), airports)


# --- parsing ----------------------------------------------------------------------------------


def airport_coordinates(rows: Iterable[Row]) -> dict[str, tuple[float, float]]:
    """Code -> (lat, lon) in degrees, for every row with a code and two finite coordinates."""
    known: dict[str, tuple[float, float]] = {}
    for row in rows:
        code = row.get(AIRPORT_CODE) or ""
        lat = parse_decimal(row.get(AIRPORT_LATITUDE))
        lon = parse_decimal(row.get(AIRPORT_LONGITUDE))
        if not code or lat is None or lon is None:
            continue
        known[code] = min(known.get(code, (lat, lon)), (lat, lon))
    return known


def parse_decimal(text: str | None) -> float | None:
    """A finite float from a plain decimal literal, else None."""
    if text is None or _DECIMAL.fullmatch(text) is None:
        return None
    number = float(text)
    return number if math.isfinite(number) else None


def parse_duration_minutes(text: str | None) -> int | None:
    """Whole minutes of `P[nD][T[nH][nM][nS]]`, else None."""
    if not text or text[0] != "P" or len(text) == 1:
        return None
    date_part, has_time, time_part = text[1:].partition("T")
    if has_time and not time_part:
        return None
    date = _designated_numbers(date_part, "D")
    time = _designated_numbers(time_part, "HMS")
    if date is None or time is None:
        return None
    seconds = time.get("S", 0)
    return date.get("D", 0) * 1440 + time.get("H", 0) * 60 + time.get("M", 0) + seconds // 60


def _designated_numbers(text: str, designators: str) -> dict[str, int] | None:
    """`12H5M` -> {"H": 12, "M": 5}; designators in the given order, each at most once."""
    found: dict[str, int] = {}
    digits = ""
    allowed = designators
    for char in text:
        if char in _ASCII_DIGITS:
            digits += char
            continue
        if char not in allowed or not digits or len(digits) > DURATION_DIGITS_MAX:
            return None
        found[char] = int(digits)
        digits = ""
        allowed = allowed[allowed.index(char) + 1 :]
    return None if digits else found


def is_airport_code(text: str | None) -> bool:
    return text is not None and len(text) == 3 and all(char in _ASCII_UPPER for char in text)


def classify(row: Row) -> _ValidRow | str:
    """The row's derived fields, or the name of the first validity rule it fails."""
    leg_id = row.get("legId") or ""
    if not leg_id:
        return "empty_leg_id"
    origin, destination = row.get("startingAirport"), row.get("destinationAirport")
    if not (is_airport_code(origin) and is_airport_code(destination)):
        return "bad_airport_code"
    minutes = parse_duration_minutes(row.get("travelDuration"))
    if minutes is None:
        return "bad_duration"
    fare = parse_decimal(row.get("totalFare"))
    if fare is None or fare < 0:
        return "bad_fare"
    arrivals = row.get("segmentsArrivalAirportCode") or ""
    if not arrivals:
        return "empty_segments"
    distance = parse_decimal(row.get("totalTravelDistance"))
    return _ValidRow(
        leg_id=leg_id,
        origin=origin,
        destination=destination,
        travel_duration=row["travelDuration"],
        minutes=minutes,
        fare=fare,
        arrivals=arrivals.split(SEGMENT_SEPARATOR),
        given_distance=distance if distance is not None and distance > 0 else None,
    )


# --- geometry ---------------------------------------------------------------------------------


def haversine_miles(a: tuple[float, float], b: tuple[float, float]) -> float:
    lat1, lon1 = map(math.radians, a)
    lat2, lon2 = map(math.radians, b)
    h = (
        math.sin((lat2 - lat1) / 2) ** 2
        + math.cos(lat1) * math.cos(lat2) * math.sin((lon2 - lon1) / 2) ** 2
    )
    return 2 * EARTH_RADIUS_MILES * math.asin(min(1.0, math.sqrt(h)))


def _chain_miles(row: _ValidRow, airports: Mapping[str, tuple[float, float]]) -> float | None:
    chain = [row.origin, *row.arrivals]
    if any(code not in airports for code in chain):
        return None
    total = 0.0
    for here, there in zip(chain, chain[1:], strict=False):
        total += haversine_miles(airports[here], airports[there])
    return total


# --- queries ----------------------------------------------------------------------------------


def compute(rows: Iterable[Row], airports: Mapping[str, tuple[float, float]]) -> ReferenceResults:
    results = ReferenceResults()
    valid: list[_ValidRow] = []
    for row in rows:
        results.rows += 1
        outcome = classify(row)
        if isinstance(outcome, str):
            results.invalid_counts[outcome] += 1
        else:
            valid.append(outcome)
    results.valid_rows = len(valid)
    many_stops = [row for row in valid if len(row.arrivals) - 1 >= 3]
    results.q1 = [(row.leg_id, row.route, row.fare, row.stopovers) for row in many_stops]
    results.q2, results.q2_skipped = _q2(valid, airports)
    results.q3 = _q3(many_stops)
    results.mean_fare, results.q4 = _q4(valid)
    return results


def _q2(valid: list[_ValidRow], airports: Mapping[str, tuple[float, float]]):
    out, skipped = [], 0
    for row in valid:
        if row.origin not in airports or row.destination not in airports:
            skipped += 1
            continue
        direct = haversine_miles(airports[row.origin], airports[row.destination])
        total = row.given_distance
        if total is None:
            total = _chain_miles(row, airports)
        if total is not None and total > 4 * direct:
            out.append((row.leg_id, row.route, total))
    return out, skipped


def _q3(many_stops: list[_ValidRow]) -> list[tuple]:
    per_route: dict[str, list[_ValidRow]] = defaultdict(list)
    for row in many_stops:
        per_route[row.route].append(row)
    out = []
    for rows in per_route.values():
        rows.sort(key=lambda r: (r.minutes, r.leg_id, r.fare, r.stopovers, r.travel_duration))
        out += [(r.leg_id, r.route, r.stopovers, r.travel_duration) for r in rows[:2]]
    return out


def _q4(valid: list[_ValidRow]) -> tuple[float | None, list[tuple]]:
    if not valid:
        return None, []
    mean = math.fsum(row.fare for row in valid) / len(valid)
    fares: dict[str, list[float]] = defaultdict(list)
    for row in valid:
        if row.fare > mean:
            fares[row.route].append(row.fare)
    return mean, [(route, math.fsum(f) / len(f), max(f)) for route, f in fares.items()]
