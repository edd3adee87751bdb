"""Vectorised drawing of one chunk of itineraries as numpy arrays (no text yet).

Times are whole minutes since `network.EPOCH0` (UTC); days are whole days since the same
instant. Segment arrays have shape (rows, SEGMENTS_MAX); only the first `segment_count[i]`
columns of row i are meaningful.
"""

from dataclasses import dataclass, fields

import numpy as np

from scripts.datagen import catalog
from scripts.datagen.network import Network

MINUTES_PER_DAY = 1440
CABINS: tuple[str, ...] = tuple(catalog.CABIN_WEIGHTS)
AIRLINES = catalog.ALL_AIRLINES
MAINLINE_COUNT = len(catalog.MAINLINE_AIRLINES)
SPIRIT = next(i for i, a in enumerate(AIRLINES) if a.distances_missing)
FARE_BASIS_CODES: tuple[str, ...] = tuple(c for a in AIRLINES for c in a.fare_basis_codes)
_FARE_BASIS_FIRST = np.cumsum([0] + [len(a.fare_basis_codes) for a in AIRLINES])[:-1]
_FARE_BASIS_COUNT = np.array([len(a.fare_basis_codes) for a in AIRLINES])
EQUIPMENT: tuple[str, ...] = tuple(dict.fromkeys(e for a in AIRLINES for e in a.equipment))
SEARCH_DAYS = int(
    (np.datetime64(catalog.SEARCH_DATE_LAST) - np.datetime64(catalog.SEARCH_DATE_FIRST))
    // np.timedelta64(1, "D")
) + 1
FIRST_SEARCH_DAY = 1  # EPOCH0 is the day before the first search date


def _probabilities(weights) -> np.ndarray:
    values = np.asarray(list(weights), dtype=float)
    return values / values.sum()


def _equipment_cdf() -> np.ndarray:
    """cdf[airline, k] over EQUIPMENT; zero-weight entries keep the cdf flat."""
    cdf = np.zeros((len(AIRLINES), len(EQUIPMENT)))
    for a, airline in enumerate(AIRLINES):
        for name, weight in airline.equipment.items():
            cdf[a, EQUIPMENT.index(name)] = weight
    cdf = np.cumsum(cdf, axis=1)
    return cdf / cdf[:, -1:]


_EQUIPMENT_CDF = _equipment_cdf()
_SEGMENT_COUNTS = np.array(list(catalog.SEGMENT_COUNT_PROBABILITIES))
_MAIN_P = _probabilities(catalog.MAIN_AIRPORT_WEIGHTS.values())
_AIRLINE_P = _probabilities(a.itinerary_share for a in catalog.MAINLINE_AIRLINES)
_PARTNER_P = _probabilities(
    0.0 if a.distances_missing else a.itinerary_share for a in catalog.MAINLINE_AIRLINES
)
_ALTERNATE_P = _probabilities(w for _, _, w in catalog.ALTERNATE_AIRPORTS)
_REGIONAL_P = _probabilities(catalog.REGIONAL_AIRLINE_WEIGHTS)
_CABIN_P = _probabilities(catalog.CABIN_WEIGHTS.values())
_CABIN_FARE = np.array([catalog.CABIN_FARE_FACTORS[c] for c in CABINS])
_SEATS = np.array(list(catalog.SEATS_REMAINING_WEIGHTS))
_SEATS_P = _probabilities(catalog.SEATS_REMAINING_WEIGHTS.values())
_NONSTOP_HOURS = np.array(list(catalog.TIMING.nonstop_departure_hour_weights))
_NONSTOP_HOURS_P = _probabilities(catalog.TIMING.nonstop_departure_hour_weights.values())
_CONNECTING_HOURS = np.array(list(catalog.TIMING.connecting_departure_hour_weights))
_CONNECTING_HOURS_P = _probabilities(catalog.TIMING.connecting_departure_hour_weights.values())
_CENTS = np.array(list(catalog.FARE_CENTS_WEIGHTS))
_CENTS_P = _probabilities(catalog.FARE_CENTS_WEIGHTS.values())
_BASIC_ECONOMY_RATE = np.array([a.basic_economy_rate for a in AIRLINES])
_AIRLINE_FARE = np.array([a.fare_factor for a in AIRLINES])
# Route price levels are a property of the market, not of the seed: fixed generator.
_ROUTE_FACTOR = np.exp(
    np.random.default_rng(20220416).normal(
        0.0, catalog.PRICING.route_factor_sigma, (len(catalog.MAIN_AIRPORT_WEIGHTS),) * 2
    )
)


@dataclass
class ItineraryChunk:
    """One chunk of rows, every field as a numpy array indexed by row (see module doc)."""

    leg_id: np.ndarray  # (n, 16) uint8, printed as 32 hex digits
    search_day: np.ndarray
    flight_day: np.ndarray
    start_node: np.ndarray  # startingAirport (a main airport)
    dest_node: np.ndarray  # destinationAirport (a main airport)
    primary_airline: np.ndarray
    fare_basis: np.ndarray  # index into FARE_BASIS_CODES
    cabin: np.ndarray  # index into CABINS
    basic_economy: np.ndarray
    seats_remaining: np.ndarray
    total_fare_cents: np.ndarray
    base_fare_cents: np.ndarray
    segment_count: np.ndarray
    distances_known: np.ndarray
    travel_minutes: np.ndarray
    elapsed_days: np.ndarray
    dep_node: np.ndarray  # (n, S) from here on
    arr_node: np.ndarray
    airline: np.ndarray
    equipment: np.ndarray  # index into EQUIPMENT
    dep_utc_minute: np.ndarray
    arr_utc_minute: np.ndarray
    dep_offset_minutes: np.ndarray
    arr_offset_minutes: np.ndarray
    distance_miles: np.ndarray

    @property
    def rows(self) -> int:
        return len(self.search_day)

    @property
    def segment_mask(self) -> np.ndarray:
        return np.arange(catalog.SEGMENTS_MAX)[None, :] < self.segment_count[:, None]

    def copy_rows(self, targets: np.ndarray, sources: np.ndarray) -> None:
        """Make rows `targets` the same itinerary as rows `sources`, field by field."""
        for f in fields(self):
            values = getattr(self, f.name)
            values[targets] = values[sources]


def _unflyable_routes() -> np.ndarray:
    """unflyable[a, b]: no itinerary between main airports a and b (same airport or city)."""
    mains = list(catalog.MAIN_AIRPORT_WEIGHTS)
    unflyable = np.eye(len(mains), dtype=bool)
    for city in catalog.SAME_CITY_AIRPORTS:
        members = [mains.index(code) for code in city]
        unflyable[np.ix_(members, members)] = True
    return unflyable


_UNFLYABLE = _unflyable_routes()


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
    """Airports of every itinerary, shape (n, S + 1); padding repeats the last airport."""
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
        town = rng.choice(town_nodes, size=int(mine.sum()), p=_probabilities(towns.values()))
        at, where = rows[mine], position[mine]
        nodes[at, where] = town
        airline[at, where - 1] = r
        airline[at, where] = r


def _draw_equipment(rng, airline: np.ndarray) -> np.ndarray:
    """An EQUIPMENT index per segment, from the segment carrier's fleet mix."""
    u = rng.random(airline.shape)
    equipment = np.zeros(airline.shape, dtype=np.int64)
    for a in np.unique(airline):
        mine = airline == a
        equipment[mine] = np.searchsorted(_EQUIPMENT_CDF[a], u[mine], side="right")
    return equipment


def _draw_first_hour(rng, segment_count) -> np.ndarray:
    n = len(segment_count)
    return np.where(
        segment_count == 1,
        rng.choice(_NONSTOP_HOURS, size=n, p=_NONSTOP_HOURS_P),
        rng.choice(_CONNECTING_HOURS, size=n, p=_CONNECTING_HOURS_P),
    )


def _block_minutes(rng, network: Network, chunk_nodes) -> tuple[np.ndarray, np.ndarray]:
    """Great-circle miles and scheduled block minutes of every (padded) segment."""
    timing = catalog.TIMING
    dep, arr = chunk_nodes[:, :-1], chunk_nodes[:, 1:]
    miles = network.miles[dep, arr]
    eastward = np.sign(network.lon[arr] - network.lon[dep]) * miles
    block = np.rint(
        timing.block_minutes_base
        + timing.block_minutes_per_mile * miles
        + timing.block_minutes_per_eastward_mile * eastward
        + rng.normal(0.0, timing.block_noise_sd_minutes, miles.shape)
    ).astype(np.int64)
    return miles, np.maximum(block, timing.block_minutes_min)


def _chain_times(dep0, layover, block):
    """Departure and arrival minutes of every segment from the first departure."""
    dep = dep0[:, None] + np.cumsum(layover + np.pad(block[:, :-1], ((0, 0), (1, 0))), axis=1)
    return dep, dep + block


def _shorten_for_same_day(rng, network: Network, chunk_nodes, segment_count, hour, local,
                          dep0, layover, block) -> None:
    """Cut the layovers of most day-time itineraries so that they land before midnight."""
    timing = catalog.TIMING
    n, width = len(segment_count), catalog.SEGMENTS_MAX
    _, arr = _chain_times(dep0, layover, block)
    last_col = (segment_count - 1)[:, None]
    last_arr = np.take_along_axis(arr, last_col, axis=1)[:, 0]
    last_node = np.take_along_axis(chunk_nodes, last_col + 1, axis=1)[:, 0]
    last_local = last_arr + network.offset_at(last_node, last_arr)
    overflow = last_local - (local // MINUTES_PER_DAY + 1) * MINUTES_PER_DAY + 1
    connecting = np.arange(width)[None, :] < segment_count[:, None]
    connecting[:, 0] = False
    spare = np.where(connecting, layover - timing.layover_minutes_min, 0)
    reducible = spare.sum(axis=1)
    rows = np.flatnonzero(
        (overflow > 0) & (reducible > 0) & (hour <= timing.same_day_last_first_hour)
        & (rng.random(n) < timing.same_day_arrival_rate)
    )
    cut = np.minimum(overflow[rows], reducible[rows])
    layover[rows] -= np.rint(spare[rows] * (cut / reducible[rows])[:, None]).astype(np.int64)


def _draw_schedule(rng, network: Network, chunk_nodes, segment_count, flight_day):
    """UTC departure/arrival minutes of every segment, chained through layovers."""
    n, width = len(segment_count), catalog.SEGMENTS_MAX
    timing = catalog.TIMING
    hour = _draw_first_hour(rng, segment_count)
    minute = rng.integers(0, 60, size=n)
    minute = np.where(rng.random(n) < timing.round_minute_rate, minute // 5 * 5, minute)
    local = flight_day * MINUTES_PER_DAY + hour * 60 + minute
    first = chunk_nodes[:, 0]
    # The offset depends on the instant it converts; one refinement settles it (DST at 2 am).
    guess = local - network.offset_at(first, local)
    dep0 = local - network.offset_at(first, guess)
    miles, block = _block_minutes(rng, network, chunk_nodes)
    median = timing.layover_median_minutes * np.interp(
        hour, *zip(*timing.layover_factor_by_hour, strict=True)
    )
    layover = np.rint(
        median[:, None] * np.exp(rng.normal(0.0, timing.layover_sigma, (n, width)))
    ).astype(np.int64)
    layover = np.clip(layover, timing.layover_minutes_min, timing.layover_minutes_max)
    layover[:, 0] = 0
    _shorten_for_same_day(rng, network, chunk_nodes, segment_count, hour, local, dep0,
                          layover, block)
    dep, arr = _chain_times(dep0, layover, block)
    return dep, arr, miles


def _published_miles(rng, miles: np.ndarray) -> np.ndarray:
    noise = rng.normal(1.0, catalog.SEGMENT_DISTANCE_NOISE_SD_MILES, miles.shape)
    return np.maximum(np.rint(miles + noise), 1).astype(np.int64)


def draw_itineraries(rng: np.random.Generator, n: int, network: Network) -> ItineraryChunk:
    """Every itinerary-level field of `n` rows; search dates and fares come later."""
    width = catalog.SEGMENTS_MAX
    start, dest, first, last = _draw_endpoints(rng, n, network)
    count_cdf = network.segment_count_cdf[start, dest]
    segment_count = _SEGMENT_COUNTS[(rng.random(n)[:, None] > count_cdf).sum(axis=1)]
    primary = rng.choice(MAINLINE_COUNT, size=n, p=_AIRLINE_P)
    nodes = _draw_chain(rng, network, first, last, primary, segment_count)
    airline = _draw_segment_airlines(rng, primary, segment_count)
    _add_regional_hops(rng, network, nodes, airline, segment_count)
    search_day = FIRST_SEARCH_DAY + rng.integers(0, SEARCH_DAYS, size=n)
    flight_day = search_day + _draw_days_ahead(rng, n)
    dep, arr, miles = _draw_schedule(rng, network, nodes, segment_count, flight_day)
    dep_node, arr_node = nodes[:, :-1].copy(), nodes[:, 1:].copy()
    dep_offset = network.offset_at(dep_node, dep)
    arr_offset = network.offset_at(arr_node, arr)
    last_col = (segment_count - 1)[:, None]
    last_arr = np.take_along_axis(arr, last_col, axis=1)[:, 0]
    last_arr_local = last_arr + np.take_along_axis(arr_offset, last_col, axis=1)[:, 0]
    first_dep_local = dep[:, 0] + dep_offset[:, 0]
    local_flight_day = first_dep_local // MINUTES_PER_DAY
    fare_basis = _FARE_BASIS_FIRST[primary] + (
        rng.random(n) * _FARE_BASIS_COUNT[primary]
    ).astype(np.int64)
    distances_known = (primary != SPIRIT) & (
        rng.random(n) >= catalog.DISTANCE_MISSING_RATE_OTHERS
    )
    zeros = np.zeros(n, dtype=np.int64)
    return ItineraryChunk(
        leg_id=np.frombuffer(rng.bytes(16 * n), dtype=np.uint8).reshape(n, 16).copy(),
        search_day=search_day,
        flight_day=local_flight_day,
        start_node=start,
        dest_node=dest,
        primary_airline=primary,
        fare_basis=fare_basis,
        cabin=rng.choice(len(CABINS), size=n, p=_CABIN_P),
        basic_economy=rng.random(n) < _BASIC_ECONOMY_RATE[primary],
        seats_remaining=zeros.copy(),
        total_fare_cents=zeros.copy(),
        base_fare_cents=zeros.copy(),
        segment_count=segment_count,
        distances_known=distances_known,
        travel_minutes=last_arr - dep[:, 0],
        elapsed_days=last_arr_local // MINUTES_PER_DAY - local_flight_day,
        dep_node=dep_node,
        arr_node=arr_node,
        airline=airline,
        equipment=_draw_equipment(rng, airline),
        dep_utc_minute=dep,
        arr_utc_minute=arr,
        dep_offset_minutes=dep_offset,
        arr_offset_minutes=arr_offset,
        distance_miles=_published_miles(rng, miles).reshape(n, width),
    )


def _draw_days_ahead(rng, n: int) -> np.ndarray:
    near = rng.random(n) < catalog.DAYS_AHEAD_NEAR_RATE
    return np.where(
        near,
        rng.integers(1, catalog.DAYS_AHEAD_NEAR_MAX + 1, size=n),
        rng.integers(catalog.DAYS_AHEAD_NEAR_MAX + 1, catalog.DAYS_AHEAD_MAX + 1, size=n),
    )


def repeat_leg_ids(rng, chunk: ItineraryChunk, rate: float) -> int:
    """Turn about `rate` of the rows into the same itinerary searched on another day.

    Returns how many rows now repeat another row's legId. The repeats keep the flight (and so
    the legId) and get a different search date; their fares are drawn afterwards, like all.
    """
    n = chunk.rows
    # A source needs a second possible search date (flight day >= first search day + 2).
    eligible = chunk.flight_day >= FIRST_SEARCH_DAY + 2
    count = min(int(rng.binomial(n, rate)), int(eligible.sum()) // 2)
    if count == 0:
        return 0
    targets = rng.choice(n, size=count, replace=False)
    is_target = np.zeros(n, dtype=bool)
    is_target[targets] = True
    pool = np.flatnonzero(eligible & ~is_target)
    sources = pool[rng.integers(0, len(pool), size=count)]
    chunk.copy_rows(targets, sources)
    old_ahead = chunk.flight_day[targets] - chunk.search_day[targets]
    span = np.minimum(catalog.DAYS_AHEAD_MAX, chunk.flight_day[targets] - FIRST_SEARCH_DAY)
    shift = 1 + (rng.random(count) * (span - 1)).astype(np.int64)
    new_ahead = 1 + (old_ahead - 1 + shift) % span
    chunk.search_day[targets] = chunk.flight_day[targets] - new_ahead
    return count


def price(rng, chunk: ItineraryChunk, network: Network) -> None:
    """Draw seats and lognormal, route-dependent fares for every row (in place)."""
    pricing = catalog.PRICING
    n = chunk.rows
    start, dest = chunk.start_node, chunk.dest_node
    direct = network.miles[start, dest]
    ahead = chunk.flight_day - chunk.search_day
    median = (
        (pricing.median_base_usd + pricing.median_usd_per_mile * direct)
        * _ROUTE_FACTOR[start, dest]
        * np.asarray(pricing.segment_count_factors)[chunk.segment_count - 1]
        * _AIRLINE_FARE[chunk.primary_airline]
        * _CABIN_FARE[chunk.cabin]
        * np.where(chunk.basic_economy, pricing.basic_economy_factor, 1.0)
        * np.where(ahead <= pricing.last_minute_days, pricing.last_minute_factor, 1.0)
        * np.where(ahead <= pricing.short_notice_days, pricing.short_notice_factor, 1.0)
    )
    fees_cents = np.rint(
        100 * (pricing.fee_flat_usd + pricing.fee_per_segment_usd * chunk.segment_count)
    ).astype(np.int64)
    dollars = np.floor(median * np.exp(rng.normal(0.0, pricing.sigma, n))).astype(np.int64)
    dollars = np.maximum(dollars, fees_cents // 100 + int(pricing.total_fare_min_usd))
    cents = np.where(
        rng.random(n) < catalog.FARE_CENTS_OTHER_RATE,
        rng.integers(0, 100, size=n),
        rng.choice(_CENTS, size=n, p=_CENTS_P),
    )
    chunk.total_fare_cents = dollars * 100 + cents
    chunk.base_fare_cents = np.rint(
        (chunk.total_fare_cents - fees_cents) / (1 + pricing.tax_rate)
    ).astype(np.int64)
    chunk.seats_remaining = rng.choice(_SEATS, size=n, p=_SEATS_P)
