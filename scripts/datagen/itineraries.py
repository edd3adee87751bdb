"""Drawing one chunk of itineraries: routing, schedule, carriers' details, repeated legIds.

The result is an ItineraryChunk (chunk.py) without fares; fares.price adds them after
repeat_leg_ids has chosen which rows search an already drawn flight again.
"""

import numpy as np

from scripts.datagen import catalog
from scripts.datagen.chunk import ItineraryChunk
from scripts.datagen.fares import CABINS
from scripts.datagen.network import Network
from scripts.datagen.routing import AIRLINES, SPIRIT, draw_routes, probabilities
from scripts.datagen.schedule import draw_schedule

FARE_BASIS_CODES: tuple[str, ...] = tuple(c for a in AIRLINES for c in a.fare_basis_codes)
EQUIPMENT: tuple[str, ...] = tuple(dict.fromkeys(e for a in AIRLINES for e in a.equipment))
SEARCH_DAYS = int(
    (np.datetime64(catalog.SEARCH_DATE_LAST) - np.datetime64(catalog.SEARCH_DATE_FIRST))
    // np.timedelta64(1, "D")
) + 1
FIRST_SEARCH_DAY = 1  # EPOCH0 is the day before the first search date
_FARE_BASIS_FIRST = np.cumsum([0] + [len(a.fare_basis_codes) for a in AIRLINES])[:-1]
_FARE_BASIS_COUNT = np.array([len(a.fare_basis_codes) for a in AIRLINES])
_CABIN_P = probabilities(catalog.CABIN_WEIGHTS.values())
_BASIC_ECONOMY_RATE = np.array([a.basic_economy_rate for a in AIRLINES])


def _equipment_search_table() -> np.ndarray:
    """Airline a's cumulative fleet mix over EQUIPMENT, shifted up by a and laid end to end,
    so that one searchsorted of (airline + uniform) draws every segment's aircraft."""
    weights = np.zeros((len(AIRLINES), len(EQUIPMENT)))
    for a, airline in enumerate(AIRLINES):
        for name, weight in airline.equipment.items():
            weights[a, EQUIPMENT.index(name)] = weight
    cdf = np.cumsum(weights, axis=1)
    cdf /= cdf[:, -1:]
    cdf[:, -1] = 1.0
    return (cdf + np.arange(len(AIRLINES))[:, None]).ravel()


_EQUIPMENT_SEARCH = _equipment_search_table()


def _draw_equipment(rng, airline: np.ndarray) -> np.ndarray:
    """An EQUIPMENT index per segment, from the segment carrier's fleet mix."""
    found = np.searchsorted(_EQUIPMENT_SEARCH, airline + rng.random(len(airline)), side="right")
    return found - airline * len(EQUIPMENT)


def _draw_days_ahead(rng, n: int) -> np.ndarray:
    near = rng.random(n) < catalog.DAYS_AHEAD_NEAR_RATE
    return np.where(
        near,
        rng.integers(1, catalog.DAYS_AHEAD_NEAR_MAX + 1, size=n),
        rng.integers(catalog.DAYS_AHEAD_NEAR_MAX + 1, catalog.DAYS_AHEAD_MAX + 1, size=n),
    )


def _published_miles(rng, miles: np.ndarray) -> np.ndarray:
    noise = rng.normal(1.0, catalog.SEGMENT_DISTANCE_NOISE_SD_MILES, len(miles))
    return np.maximum(np.rint(miles + noise), 1).astype(np.int64)


def draw_itineraries(rng: np.random.Generator, n: int, network: Network) -> ItineraryChunk:
    """Every field of `n` rows but the fares and seats (see fares.price)."""
    routes = draw_routes(rng, n, network)
    mask = routes.segment_mask
    dep_node, arr_node = routes.nodes[:, :-1][mask], routes.nodes[:, 1:][mask]
    airline = routes.airline[mask]
    search_day = FIRST_SEARCH_DAY + rng.integers(0, SEARCH_DAYS, size=n)
    schedule = draw_schedule(rng, network, dep_node, arr_node, routes.segment_count,
                             search_day + _draw_days_ahead(rng, n))
    primary = routes.primary_airline
    fare_basis = _FARE_BASIS_FIRST[primary] + (
        rng.random(n) * _FARE_BASIS_COUNT[primary]
    ).astype(np.int64)
    distances_known = (primary != SPIRIT) & (
        rng.random(n) >= catalog.DISTANCE_MISSING_RATE_OTHERS
    )
    return ItineraryChunk(
        leg_id=np.frombuffer(rng.bytes(16 * n), dtype=np.uint8).reshape(n, 16),
        search_day=search_day,
        flight_day=schedule.flight_day,
        start_node=routes.start,
        dest_node=routes.dest,
        primary_airline=primary,
        fare_basis=fare_basis,
        cabin=rng.choice(len(CABINS), size=n, p=_CABIN_P),
        basic_economy=rng.random(n) < _BASIC_ECONOMY_RATE[primary],
        segment_count=routes.segment_count,
        distances_known=distances_known,
        travel_minutes=schedule.travel_minutes,
        elapsed_days=schedule.elapsed_days,
        dep_node=dep_node,
        arr_node=arr_node,
        airline=airline,
        equipment=_draw_equipment(rng, airline),
        dep_utc_minute=schedule.dep_utc_minute,
        arr_utc_minute=schedule.arr_utc_minute,
        dep_offset_minutes=schedule.dep_offset_minutes,
        arr_offset_minutes=schedule.arr_offset_minutes,
        distance_miles=_published_miles(rng, schedule.miles),
    )


def repeat_leg_ids(rng, chunk: ItineraryChunk, rate: float) -> tuple[ItineraryChunk, int]:
    """Turn about `rate` of the rows into the same flight searched on another day.

    Returns the new chunk and how many of its rows repeat another row's legId. A repeat keeps
    the flight (and so the legId) and gets a different search date; fares come afterwards.
    """
    n = chunk.rows
    # A source needs a second possible search date (flight day >= first search day + 2).
    eligible = chunk.flight_day >= FIRST_SEARCH_DAY + 2
    count = min(int(rng.binomial(n, rate)), int(eligible.sum()) // 2)
    if count == 0:
        return chunk, 0
    targets = rng.choice(n, size=count, replace=False)
    is_target = np.zeros(n, dtype=bool)
    is_target[targets] = True
    pool = np.flatnonzero(eligible & ~is_target)
    source_of = np.arange(n)
    source_of[targets] = pool[rng.integers(0, len(pool), size=count)]
    chunk = chunk.gather(source_of)
    old_ahead = chunk.flight_day[targets] - chunk.search_day[targets]
    span = np.minimum(catalog.DAYS_AHEAD_MAX, chunk.flight_day[targets] - FIRST_SEARCH_DAY)
    shift = 1 + (rng.random(count) * (span - 1)).astype(np.int64)
    chunk.search_day[targets] = chunk.flight_day[targets] - (1 + (old_ahead - 1 + shift) % span)
    return chunk, count
