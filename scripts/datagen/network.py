"""The route network: airports with real coordinates and time zones, distances, hub choice.

Everything here is computed once per run from the catalog and `airportsdata`, then shared
read-only by every chunk.
"""

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import cache
from zoneinfo import ZoneInfo

import airportsdata
import numpy as np

from scripts.datagen import catalog

EARTH_RADIUS_MILES = 3958.8
# Minute 0 of every time axis in the generator: a day before the first search date.
EPOCH0 = datetime.fromisoformat(catalog.SEARCH_DATE_FIRST).replace(tzinfo=UTC) - timedelta(days=1)
EPOCH0_S = int(EPOCH0.timestamp())
# Long enough for the last search, the furthest flight date and the longest itinerary.
_SEARCH_SPAN = date.fromisoformat(catalog.SEARCH_DATE_LAST) - date.fromisoformat(
    catalog.SEARCH_DATE_FIRST
)
TIME_AXIS_DAYS = _SEARCH_SPAN.days + catalog.DAYS_AHEAD_MAX + 8


def haversine_miles(lat1, lon1, lat2, lon2):
    """Great-circle distance in miles (docs/queries.md: Earth radius 3958.8 miles); numpy-aware."""
    phi1, phi2 = np.radians(lat1), np.radians(lat2)
    d_phi = phi2 - phi1
    d_lambda = np.radians(np.asarray(lon2) - np.asarray(lon1))
    a = np.sin(d_phi / 2) ** 2 + np.cos(phi1) * np.cos(phi2) * np.sin(d_lambda / 2) ** 2
    return 2 * EARTH_RADIUS_MILES * np.arcsin(np.sqrt(a))


def network_airport_codes() -> list[str]:
    """Every airport an itinerary can touch, main airports first, in a fixed order."""
    codes = list(catalog.MAIN_AIRPORT_WEIGHTS)
    extra = [alt for _, alt, _ in catalog.ALTERNATE_AIRPORTS]
    for airline in catalog.ALL_AIRLINES:
        extra.extend(airline.connections)
    for code in extra:
        if code not in codes:
            codes.append(code)
    return codes


def _offset_minutes(zone: ZoneInfo, hour: int) -> int:
    instant = EPOCH0 + timedelta(hours=hour)
    return int(instant.astimezone(zone).utcoffset() // timedelta(minutes=1))


def _utc_offsets_minutes(time_zones: list[str]) -> np.ndarray:
    """UTC offset in minutes of each zone at every hour of the time axis, shape (zones, hours).

    DST transitions fall on whole UTC hours for every zone used, so an hourly table is exact.
    Offsets are looked up once a day, and hour by hour only on days when they change.
    """
    table = np.empty((len(time_zones), TIME_AXIS_DAYS * 24), dtype=np.int32)
    for row, name in enumerate(time_zones):
        zone = ZoneInfo(name)
        daily = [_offset_minutes(zone, day * 24) for day in range(TIME_AXIS_DAYS + 1)]
        for day in range(TIME_AXIS_DAYS):
            hours = range(day * 24, day * 24 + 24)
            if daily[day] == daily[day + 1]:
                table[row, hours.start : hours.stop] = daily[day]
            else:
                table[row, hours.start : hours.stop] = [_offset_minutes(zone, h) for h in hours]
    return table


@dataclass(frozen=True)
class Network:
    """Airports (index = position in `codes`), pairwise miles, UTC offsets, hub tables.

    Immutable once built (its arrays are read-only), so one instance is shared by every chunk
    and every worker thread.

    `hub_cdf[a, cur, dest]` is the cumulative distribution over `hub_nodes[a]` of the next
    connecting airport for airline `a` flying from `cur` towards `dest`; `hub_nodes` is padded
    with -1 where an airline has fewer connections than the widest one.
    `segment_count_cdf[start, dest]` is the cumulative distribution over
    `catalog.SEGMENT_COUNT_PROBABILITIES`'s counts for a route between main airports.
    """

    codes: np.ndarray
    index: dict[str, int]
    lat: np.ndarray
    lon: np.ndarray
    miles: np.ndarray
    utc_offset_minutes: np.ndarray
    hub_nodes: np.ndarray
    hub_cdf: np.ndarray
    segment_count_cdf: np.ndarray

    def offset_at(self, nodes: np.ndarray, utc_minutes: np.ndarray) -> np.ndarray:
        """UTC offset in minutes of each airport at each instant (minutes since EPOCH0)."""
        return self.utc_offset_minutes[nodes, utc_minutes // 60]


def _hub_tables(codes: list[str], miles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    airlines = catalog.ALL_AIRLINES
    width = max(len(a.connections) for a in airlines)
    size = len(codes)
    position = {code: i for i, code in enumerate(codes)}
    hub_nodes = np.full((len(airlines), width), -1, dtype=np.int64)
    hub_cdf = np.ones((len(airlines), size, size, width))
    direct = np.maximum(miles, 1.0)
    for a, airline in enumerate(airlines):
        nodes = np.array([position[c] for c in airline.connections])
        weights = np.array(list(airline.connections.values()))
        hub_nodes[a, : len(nodes)] = nodes
        # via[cur, dest, h] = miles(cur, h) + miles(h, dest)
        # via[cur, dest, h] = miles(cur, h) + miles(h, dest)
        into, out_of = miles[:, nodes][:, None, :], miles[nodes, :].T[None, :, :]
        ratio = np.maximum((into + out_of) / direct[:, :, None], 1.0)
        w = weights[None, None, :] * ratio ** -catalog.DETOUR_EXPONENT
        # No hop between airports of one city (JFK-LGA), nor to where the flight already is.
        too_short = (into < catalog.HOP_MILES_MIN) | (out_of < catalog.HOP_MILES_MIN)
        w = np.where(too_short, 0.0, w)
        total = w.sum(axis=2, keepdims=True)
        # Pairs whose every candidate is excluded never occur; keep their rows well-formed.
        w = np.where(total > 0, w / np.where(total > 0, total, 1), 1.0 / len(nodes))
        hub_cdf[a, :, :, : len(nodes)] = np.cumsum(w, axis=2)
        hub_cdf[a, :, :, len(nodes) - 1 :] = 1.0
    return hub_nodes, hub_cdf


def route_probabilities() -> np.ndarray:
    """P(startingAirport, destinationAirport) over main airports, as the rows draw them."""
    weights = np.array(list(catalog.MAIN_AIRPORT_WEIGHTS.values()), dtype=float)
    mains = list(catalog.MAIN_AIRPORT_WEIGHTS)
    flyable = ~np.eye(len(mains), dtype=bool)
    for city in catalog.SAME_CITY_AIRPORTS:
        members = [mains.index(code) for code in city]
        flyable[np.ix_(members, members)] = False
    pair = weights[:, None] * weights[None, :] * flyable
    pair /= pair.sum(axis=1, keepdims=True)
    return pair * (weights / weights.sum())[:, None]


def _segment_count_table(main_miles: np.ndarray) -> np.ndarray:
    """cdf[start, dest, :] over segment counts: nonstop and 3+ shares follow the route's miles,
    scaled so that the mix over all rows is SEGMENT_COUNT_PROBABILITIES."""
    counts = catalog.SEGMENT_COUNT_PROBABILITIES
    route_p = route_probabilities()
    nonstop = np.interp(main_miles, *zip(*catalog.NONSTOP_SHARE_BY_MILES, strict=True))
    three_plus = np.interp(main_miles, *zip(*catalog.THREE_PLUS_SHARE_BY_MILES, strict=True))
    nonstop *= counts[1] / (route_p * nonstop).sum()
    three_plus_total = sum(p for k, p in counts.items() if k >= 3)
    three_plus *= three_plus_total / (route_p * three_plus).sum()
    table = np.empty(main_miles.shape + (len(counts),))
    table[..., 0] = nonstop
    table[..., 1] = 1.0 - nonstop - three_plus
    for column, k in enumerate(list(counts)[2:], start=2):
        table[..., column] = three_plus * counts[k] / three_plus_total
    assert (table >= 0).all(), "segment-count shares by distance do not fit the overall mix"
    cdf = np.cumsum(table, axis=2)
    cdf[..., -1] = 1.0
    return cdf


@cache
def known_airports() -> dict[str, dict]:
    """`airportsdata`'s airports by IATA code (loaded once per process; treat as read-only)."""
    return airportsdata.load("IATA")


def _read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


@cache
def build_network() -> Network:
    """Look every network airport up in `airportsdata` and derive the shared tables."""
    known = known_airports()
    codes = network_airport_codes()
    lat = np.array([known[c]["lat"] for c in codes])
    lon = np.array([known[c]["lon"] for c in codes])
    miles = haversine_miles(lat[:, None], lon[:, None], lat[None, :], lon[None, :])
    zones = sorted({known[c]["tz"] for c in codes})
    zone_row = np.array([zones.index(known[c]["tz"]) for c in codes])
    offsets = _utc_offsets_minutes(zones)[zone_row]
    hub_nodes, hub_cdf = _hub_tables(codes, miles)
    main_count = len(catalog.MAIN_AIRPORT_WEIGHTS)
    return Network(
        codes=_read_only(np.array(codes)),
        index={c: i for i, c in enumerate(codes)},
        lat=_read_only(lat),
        lon=_read_only(lon),
        miles=_read_only(miles),
        utc_offset_minutes=_read_only(offsets),
        hub_nodes=_read_only(hub_nodes),
        hub_cdf=_read_only(hub_cdf),
        segment_count_cdf=_read_only(_segment_count_table(miles[:main_count, :main_count])),
    )
