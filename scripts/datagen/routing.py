"""Where itineraries go: routes, segment counts, connecting airports and carriers.

Chains are drawn padded, shape (rows, SEGMENTS_MAX + 1) for airports and (rows,
SEGMENTS_MAX) for carriers; only the first `segment_count[i]` segments of a row count.
"""

from dataclasses import dataclass

import numpy as np

from scripts.datagen import catalog
from scripts.datagen.network import Network

AIRLINES = catalog.ALL_AIRLINES
MAINLINE_COUNT = len(catalog.MAINLINE_AIRLINES)
SPIRIT = next(i for i, a in enumerate(AIRLINES) if a.distances_missing)


def probabilities(weights) -> np.ndarray:
    values = np.asarray(list(weights), dtype=float)
    return values / values.sum()


_SEGMENT_COUNTS = np.array(list(catalog.SEGMENT_COUNT_PROBABILITIES))
_MAIN_P = probabilities(catalog.MAIN_AIRPORT_WEIGHTS.values())
_AIRLINE_P = probabilities(a.itinerary_share for a in catalog.MAINLINE_AIRLINES)
_PARTNER_P = probabilities(
    0.0 if a.distances_missing else a.itinerary_share for a in catalog.MAINLINE_AIRLINES
)
_ALTERNATE_P = probabilities(w for _, _, w in catalog.ALTERNATE_AIRPORTS)
_REGIONAL_P = probabilities(catalog.REGIONAL_AIRLINE_WEIGHTS)


def _unflyable_routes() -> np.ndarray:
    """unflyable[a, b]: no itinerary between main airports a and b (same airport or city)."""
    mains = list(catalog.MAIN_AIRPORT_WEIGHTS)
    unflyable = np.eye(len(mains), dtype=bool)
    for city in catalog.SAME_CITY_AIRPORTS:
        members = [mains.index(code) for code in city]
        unflyable[np.ix_(members, members)] = True
    return unflyable


_UNFLYABLE = _unflyable_routes()


@dataclass
class Routes:
    """The routing of a chunk's rows (airport and carrier chains padded, see module doc)."""

    start: np.ndarray  # startingAirport
    dest: np.ndarray  # destinationAirport
    segment_count: np.ndarray
    primary_airline: np.ndarray
    nodes: np.ndarray  # (rows, SEGMENTS_MAX + 1) airports flown through
    airline: np.ndarray  # (rows, SEGMENTS_MAX) carrier of each segment

    @property
    def segment_mask(self) -> np.ndarray:
        return np.arange(catalog.SEGMENTS_MAX)[None, :] < self.segment_count[:, None]


def _draw_other_main(rng, avoid: np.ndarray) -> np.ndarray:
    """A main airport per row, drawn by weight, that makes a real route with `avoid`."""
    drawn = rng.choice(len(_MAIN_P), size=len(avoid), p=_MAIN_P)
    clash = _UNFLYABLE[avoid, drawn]
    while clash.any():
        drawn[clash] = rng.choice(len(_MAIN_P), size=int(clash.sum()), p=_MAIN_P)
        clash = _UNFLYABLE[avoid, drawn]
    return drawn


def _draw_endpoints(rng, n: int, network: Network):
    """startingAirport, destinationAirport, and the airports actually first left/last reached."""
    start = rng.choice(len(_MAIN_P), size=n, p=_MAIN_P)
    dest = _draw_other_main(rng, start)
    first, last = start.copy(), dest.copy()
    alternate = np.flatnonzero(rng.random(n) < catalog.ALTERNATE_ROW_RATE)
    pair = rng.choice(len(_ALTERNATE_P), size=len(alternate), p=_ALTERNATE_P)
    main = np.array([network.index[m] for m, _, _ in catalog.ALTERNATE_AIRPORTS])[pair]
    alt = np.array([network.index[a] for _, a, _ in catalog.ALTERNATE_AIRPORTS])[pair]
    at_origin = rng.random(len(alternate)) < 0.5
    o, d = alternate[at_origin], alternate[~at_origin]
    start[o], first[o] = main[at_origin], alt[at_origin]
    dest[o] = last[o] = _draw_other_main(rng, start[o])
    dest[d], last[d] = main[~at_origin], alt[~at_origin]
    start[d] = first[d] = _draw_other_main(rng, dest[d])
    return start, dest, first, last


def _draw_chain(rng, network: Network, first, last, airline, segment_count) -> np.ndarray:
    """Airports of every itinerary; padding repeats the last airport."""
    width = catalog.SEGMENTS_MAX
    nodes = np.repeat(last[:, None], width + 1, axis=1)
    nodes[:, 0] = first
    for j in range(1, width):
        rows = np.flatnonzero(segment_count > j)
        if len(rows) == 0:
            break
        cdf = network.hub_cdf[airline[rows], nodes[rows, j - 1], last[rows]]
        pick = (rng.random(len(rows))[:, None] > cdf).sum(axis=1)
        nodes[rows, j] = network.hub_nodes[airline[rows], pick]
    return nodes


def _draw_segment_airlines(rng, primary, segment_count) -> np.ndarray:
    """Primary carrier on every segment; some itineraries switch to a partner midway."""
    n, width = len(primary), catalog.SEGMENTS_MAX
    airline = np.repeat(primary[:, None], width, axis=1)
    mixed = np.flatnonzero(
        (segment_count > 1) & (primary != SPIRIT) & (rng.random(n) < catalog.MIXED_CARRIER_RATE)
    )
    partner = rng.choice(MAINLINE_COUNT, size=len(mixed), p=_PARTNER_P)
    partner = np.where(partner == primary[mixed], (partner + 1) % MAINLINE_COUNT, partner)
    partner = np.where(partner == SPIRIT, (partner + 1) % MAINLINE_COUNT, partner)
    switch_at = 1 + (rng.random(len(mixed)) * (segment_count[mixed] - 1)).astype(np.int64)
    later = np.arange(width)[None, :] >= switch_at[:, None]
    airline[mixed] = np.where(later, partner[:, None], airline[mixed])
    return airline


def _add_regional_hops(rng, network: Network, nodes, airline, segment_count) -> None:
    """Route some 3+ segment itineraries through a regional carrier's small airport."""
    n = len(segment_count)
    rows = np.flatnonzero((segment_count >= 3) & (rng.random(n) < catalog.REGIONAL_HOP_RATE))
    regional = MAINLINE_COUNT + rng.choice(len(_REGIONAL_P), size=len(rows), p=_REGIONAL_P)
    position = 1 + (rng.random(len(rows)) * (segment_count[rows] - 1)).astype(np.int64)
    for r in np.unique(regional):
        mine = regional == r
        towns = AIRLINES[r].connections
        town_nodes = np.array([network.index[c] for c in towns])
        town = rng.choice(town_nodes, size=int(mine.sum()), p=probabilities(towns.values()))
        at, where = rows[mine], position[mine]
        nodes[at, where] = town
        airline[at, where - 1] = r
        airline[at, where] = r


def draw_routes(rng, n: int, network: Network) -> Routes:
    """Route, segment count, airports flown through and carriers of `n` rows."""
    start, dest, first, last = _draw_endpoints(rng, n, network)
    count_cdf = network.segment_count_cdf[start, dest]
    segment_count = _SEGMENT_COUNTS[(rng.random(n)[:, None] > count_cdf).sum(axis=1)]
    primary = rng.choice(MAINLINE_COUNT, size=n, p=_AIRLINE_P)
    nodes = _draw_chain(rng, network, first, last, primary, segment_count)
    airline = _draw_segment_airlines(rng, primary, segment_count)
    _add_regional_hops(rng, network, nodes, airline, segment_count)
    return Routes(start, dest, segment_count, primary, nodes, airline)
