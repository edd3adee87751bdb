"""What a row costs: lognormal, route-dependent fares, taxes, seats left (catalog.Pricing)."""

import numpy as np

from scripts.datagen import catalog
from scripts.datagen.chunk import ItineraryChunk
from scripts.datagen.network import Network
from scripts.datagen.routing import AIRLINES, probabilities

CABINS: tuple[str, ...] = tuple(catalog.CABIN_WEIGHTS)
_PRICING = catalog.PRICING
_CABIN_FARE = np.array([catalog.CABIN_FARE_FACTORS[c] for c in CABINS])
_AIRLINE_FARE = np.array([a.fare_factor for a in AIRLINES])
_SEGMENT_COUNT_FARE = np.asarray(_PRICING.segment_count_factors)
_SEATS = np.array(list(catalog.SEATS_REMAINING_WEIGHTS))
_SEATS_P = probabilities(catalog.SEATS_REMAINING_WEIGHTS.values())
_CENTS = np.array(list(catalog.FARE_CENTS_WEIGHTS))
_CENTS_P = probabilities(catalog.FARE_CENTS_WEIGHTS.values())
# Route price levels are a property of the market, not of the seed: fixed generator.
_ROUTE_FACTOR = np.exp(
    np.random.default_rng(20220416).normal(
        0.0, _PRICING.route_factor_sigma, (len(catalog.MAIN_AIRPORT_WEIGHTS),) * 2
    )
)


def _median_fares_usd(chunk: ItineraryChunk, network: Network) -> np.ndarray:
    start, dest = chunk.start_node, chunk.dest_node
    ahead = chunk.flight_day - chunk.search_day
    return (
        (_PRICING.median_base_usd + _PRICING.median_usd_per_mile * network.miles[start, dest])
        * _ROUTE_FACTOR[start, dest]
        * _SEGMENT_COUNT_FARE[chunk.segment_count - 1]
        * _AIRLINE_FARE[chunk.primary_airline]
        * _CABIN_FARE[chunk.cabin]
        * np.where(chunk.basic_economy, _PRICING.basic_economy_factor, 1.0)
        * np.where(ahead <= _PRICING.last_minute_days, _PRICING.last_minute_factor, 1.0)
        * np.where(ahead <= _PRICING.short_notice_days, _PRICING.short_notice_factor, 1.0)
    )


def price(rng, chunk: ItineraryChunk, network: Network) -> None:
    """Draw every row's seats left, total fare and base fare (in place)."""
    n = chunk.rows
    fees_cents = np.rint(
        100 * (_PRICING.fee_flat_usd + _PRICING.fee_per_segment_usd * chunk.segment_count)
    ).astype(np.int64)
    noise = np.exp(rng.normal(0.0, _PRICING.sigma, n))
    dollars = np.floor(_median_fares_usd(chunk, network) * noise).astype(np.int64)
    dollars = np.maximum(dollars, fees_cents // 100 + int(_PRICING.total_fare_min_usd))
    cents = np.where(
        rng.random(n) < catalog.FARE_CENTS_OTHER_RATE,
        rng.integers(0, 100, size=n),
        rng.choice(_CENTS, size=n, p=_CENTS_P),
    )
    chunk.total_fare_cents = dollars * 100 + cents
    chunk.base_fare_cents = np.rint(
        (chunk.total_fare_cents - fees_cents) / (1 + _PRICING.tax_rate)
    ).astype(np.int64)
    chunk.seats_remaining = rng.choice(_SEATS, size=n, p=_SEATS_P)
