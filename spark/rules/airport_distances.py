"""Great-circle miles between airports, columnar (pyarrow.compute), in the `kaska` source's
Python workers: each row's direct distance and, where the given total is missing, the sum of
its legs, so that Q2 reaches Spark as a filter already applied.

`AirportCoordinates` is what the driver collected from a session's airports
(`spark.rules.query_frames.prepare_airports`: one (lat, lon) per known code) and hands the
workers as JSON through the source's `arrowTransformArgument` option; JSON round-trips every double
exactly. `AirportTable` is its lookup form in a worker, built once per distinct JSON text.

The formula is the Spark-on-CSV path's (`scripts.bench.spark_csv._haversine`), operation for
operation, on the C library's sin/cos/asin (as the plain-Python reference's `math`), and legs are
summed from 0.0 in chain order, as the reference sums them.

Pure functions and immutable values; thread-safe.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark.rules.contract import EARTH_RADIUS_MILES
from spark.rules.route_id import AIRPORT_CODES, airport_code_number, is_airport_code

_DEGREES_TO_RADIANS = math.pi / 180  # Java's Math.toRadians multiplies by the same double
_AIRPORT_TABLES_CACHED_MAX = 4  # distinct sessions' airports a worker keeps parsed
_ROWS_FINISHED_ONE_BY_ONE = 8  # sums_in_order: when this few segments are still running


class AirportCoordinatesError(ValueError):
    """An `arrowTransformArgument` that is not the JSON of `AirportCoordinates`."""


@dataclass(frozen=True)
class AirportCoordinates:
    """Known airports: code -> (latitude, longitude), finite decimal degrees."""

    by_code: dict[str, tuple[float, float]]

    def to_json(self) -> str:
        return json.dumps(self.by_code, separators=(",", ":"), allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> AirportCoordinates:
        try:
            document = json.loads(text)
        except json.JSONDecodeError as error:
            raise AirportCoordinatesError(f"airport coordinates are not JSON: {error}") from error
        if not isinstance(document, dict):
            raise AirportCoordinatesError("airport coordinates must be a JSON object")
        by_code = {}
        for code, place in document.items():
            if not (isinstance(place, list) and len(place) == 2
                    and all(isinstance(x, float | int) and not isinstance(x, bool)
                            and math.isfinite(x) for x in place)):
                raise AirportCoordinatesError(f"airport {code!r}: bad coordinates {place!r}")
            by_code[code] = (float(place[0]), float(place[1]))
        return cls(by_code)


class AirportTable:
    """`AirportCoordinates` as arrays: lookups by any code text, and by code number for the
    three-letter codes that valid rows' endpoints are."""

    def __init__(self, coordinates: AirportCoordinates) -> None:
        codes = list(coordinates.by_code)
        self._index_of_code = {code: index for index, code in enumerate(codes)}
        # One NaN slot after the known ones: an unknown code's index points there.
        self._latitudes = np.array([coordinates.by_code[c][0] for c in codes] + [math.nan])
        self._longitudes = np.array([coordinates.by_code[c][1] for c in codes] + [math.nan])
        self._by_number = np.full(AIRPORT_CODES, len(codes), dtype=np.int64)
        for index, code in enumerate(codes):
            if is_airport_code(code):
                self._by_number[airport_code_number(code)] = index

    def locate(self, codes: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """(latitudes, longitudes) of `codes` (any text), NaN where unknown.

        Looked up once per distinct text, in a dict: a batch's chains name a few hundred
        airports, and `pc.index_in` would hash the session's every airport (7,886 in the real
        file) on each call (200k rows: 0.023 CPU-s that way, 0.010 this way)."""
        unknown = len(self._latitudes) - 1  # the NaN slot
        distinct = pc.dictionary_encode(codes)
        slots = np.array([self._index_of_code.get(text, unknown)
                          for text in distinct.dictionary.to_pylist()] + [unknown],
                         dtype=np.int64)
        index = slots[pc.fill_null(distinct.indices, len(slots) - 1)
                      .to_numpy(zero_copy_only=False)]
        return self._latitudes[index], self._longitudes[index]

    def locate_numbers(self, numbers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(latitudes, longitudes) of airport code numbers (spark.rules.route_id), NaN where
        unknown."""
        index = self._by_number[numbers]
        return self._latitudes[index], self._longitudes[index]

    def chain_miles(self, origins: pa.Array, arrivals: pa.ListArray) -> np.ndarray:
        """Per row, the miles from its origin through each of its arrivals in order, summed
        from 0.0 leg by leg; NaN where an airport of the chain is unknown. Every row has at
        least one arrival."""
        offsets = arrivals.offsets.to_numpy()
        offsets = offsets - offsets[0]
        to_lat, to_lon = self.locate(arrivals.flatten())
        origin_lat, origin_lon = self.locate(origins)
        # Each arrival ends one leg, which starts at the arrival before it, or at the origin
        # for a row's first leg.
        from_lat, from_lon = np.roll(to_lat, 1), np.roll(to_lon, 1)
        firsts = offsets[:-1]
        from_lat[firsts], from_lon[firsts] = origin_lat, origin_lon
        return sums_in_order(haversine_miles(from_lat, from_lon, to_lat, to_lon), offsets)


@functools.lru_cache(maxsize=_AIRPORT_TABLES_CACHED_MAX)
def airport_table(coordinates_json: str) -> AirportTable:
    """The lookup form of a session's coordinates, parsed once per worker and session."""
    return AirportTable(AirportCoordinates.from_json(coordinates_json))


def haversine_miles(lat1, lon1, lat2, lon2) -> np.ndarray:
    """Great-circle miles between degree arrays (NaN in, NaN out)."""
    lat1, lon1, lat2, lon2 = (pa.array(x, pa.float64()) for x in (lat1, lon1, lat2, lon2))
    half_dlat = pc.divide(_radians(pc.subtract(lat2, lat1)), 2.0)
    half_dlon = pc.divide(_radians(pc.subtract(lon2, lon1)), 2.0)
    sin_dlat, sin_dlon = pc.sin(half_dlat), pc.sin(half_dlon)
    a = pc.add(pc.multiply(sin_dlat, sin_dlat),
               pc.multiply(pc.multiply(pc.multiply(pc.cos(_radians(lat1)),
                                                   pc.cos(_radians(lat2))), sin_dlon), sin_dlon))
    # Rounding can push sqrt(a) a hair above 1 for antipodes; asin would give NaN. (Not
    # min_element_wise: it passes over a NaN, and an unknown airport must stay NaN.)
    root = pc.sqrt(a)
    root = pc.if_else(pc.greater(root, 1.0), 1.0, root)
    miles = pc.multiply(2 * EARTH_RADIUS_MILES, pc.asin(root))
    return miles.to_numpy(zero_copy_only=False)


def _radians(degrees: pa.Array) -> pa.Array:
    return pc.multiply(degrees, _DEGREES_TO_RADIANS)


def sums_in_order(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Per segment [offsets[i], offsets[i+1]) of `values`, their sum from 0.0 in order (what
    a Python loop gives, bit for bit: no pairwise summation), in O(len(values)) array work."""
    lengths = np.diff(offsets)
    order = np.argsort(-lengths, kind="stable")  # longest first: each step a prefix
    starts, descending = offsets[:-1][order], lengths[order]
    totals = np.zeros(len(lengths))
    for position in range(int(descending[0]) if len(descending) else 0):
        rows = int(np.searchsorted(-descending, -position, side="left"))  # length > position
        if rows <= _ROWS_FINISHED_ONE_BY_ONE:
            # A few long chains left (a hostile row may have 100k segments): one sequential
            # cumulative sum each, instead of a step per position.
            for row in range(rows):
                rest = values[starts[row] + position:starts[row] + descending[row]]
                totals[row] = np.cumsum(np.concatenate(([totals[row]], rest)))[-1]
            break
        totals[:rows] += values[starts[:rows] + position]
    sums = np.empty_like(totals)
    sums[order] = totals
    return sums
