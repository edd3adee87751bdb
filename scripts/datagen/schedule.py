"""When segments fly: first departures, block times, layovers and local UTC offsets.

Works on flat segment arrays (see chunk.py's layout); the model's constants and where they
come from are in catalog.Timing.
"""

from dataclasses import dataclass

import numpy as np

from scripts.datagen import catalog
from scripts.datagen.network import Network
from scripts.datagen.routing import probabilities

MINUTES_PER_DAY = 1440
_TIMING = catalog.TIMING
_NONSTOP_HOURS = np.array(list(_TIMING.nonstop_departure_hour_weights))
_NONSTOP_HOURS_P = probabilities(_TIMING.nonstop_departure_hour_weights.values())
_CONNECTING_HOURS = np.array(list(_TIMING.connecting_departure_hour_weights))
_CONNECTING_HOURS_P = probabilities(_TIMING.connecting_departure_hour_weights.values())
_LAYOVER_FACTOR_HOURS, _LAYOVER_FACTORS = zip(*_TIMING.layover_factor_by_hour, strict=True)


@dataclass
class Schedule:
    """Segment times (flat) and the row-level facts derived from them."""

    dep_utc_minute: np.ndarray
    arr_utc_minute: np.ndarray
    dep_offset_minutes: np.ndarray
    arr_offset_minutes: np.ndarray
    miles: np.ndarray  # great-circle miles of each segment
    flight_day: np.ndarray  # per row: local date of the first departure
    travel_minutes: np.ndarray  # per row: first departure to last arrival
    elapsed_days: np.ndarray  # per row: local arrival date - flight date


@dataclass(frozen=True)
class _Segments:
    """Where each row's segments sit in the flat arrays."""

    row: np.ndarray  # row of each segment
    first: np.ndarray  # index of each row's first segment
    last: np.ndarray  # index of each row's last segment

    @classmethod
    def of(cls, segment_count: np.ndarray) -> "_Segments":
        end = np.cumsum(segment_count)
        return cls(np.repeat(np.arange(len(segment_count)), segment_count),
                   end - segment_count, end - 1)


def _draw_first_departure(rng, network: Network, first_node, segment_count, flight_day):
    """Local hour and UTC minute of each row's first departure."""
    n = len(segment_count)
    hour = np.where(
        segment_count == 1,
        rng.choice(_NONSTOP_HOURS, size=n, p=_NONSTOP_HOURS_P),
        rng.choice(_CONNECTING_HOURS, size=n, p=_CONNECTING_HOURS_P),
    )
    minute = rng.integers(0, 60, size=n)
    minute = np.where(rng.random(n) < _TIMING.round_minute_rate, minute // 5 * 5, minute)
    local = flight_day * MINUTES_PER_DAY + hour * 60 + minute
    # The offset depends on the instant it converts; one refinement settles it (DST at 2 am).
    guess = local - network.offset_at(first_node, local)
    return hour, local - network.offset_at(first_node, guess)


def _block_minutes(rng, network: Network, dep_node, arr_node) -> tuple[np.ndarray, np.ndarray]:
    """Great-circle miles and scheduled block minutes of every segment."""
    miles = network.miles[dep_node, arr_node]
    eastward = np.sign(network.lon[arr_node] - network.lon[dep_node]) * miles
    block = np.rint(
        _TIMING.block_minutes_base
        + _TIMING.block_minutes_per_mile * miles
        + _TIMING.block_minutes_per_eastward_mile * eastward
        + rng.normal(0.0, _TIMING.block_noise_sd_minutes, len(miles))
    ).astype(np.int64)
    return miles, np.maximum(block, _TIMING.block_minutes_min)


def _chain(segments: _Segments, dep0, layover, block) -> tuple[np.ndarray, np.ndarray]:
    """Departure and arrival minutes of every segment, from each row's first departure."""
    step = layover.copy()  # layover before a segment plus the block of the one before it
    step[1:] += block[:-1]
    step[segments.first] = 0
    elapsed = np.cumsum(step)
    dep = dep0[segments.row] + elapsed - elapsed[segments.first][segments.row]
    return dep, dep + block


def _fit_in_the_day(rng, network: Network, segments: _Segments, arr_node, hour, dep0,
                    first_local, layover, block) -> np.ndarray:
    """Keep most itineraries that leave by day from landing in the small hours, as the real
    ones do: some wait overnight for the last connection, the others get shorter layovers
    and, if that is not enough, leave earlier (not before first_hour_min). Changes `layover`
    in place and returns the new first departures."""
    n = len(hour)
    _, arr = _chain(segments, dep0, layover, block)
    last_arr = arr[segments.last]
    last_local = last_arr + network.offset_at(arr_node[segments.last], last_arr)
    # Land by a random time around midnight, not all at 23:59.
    latest = rng.integers(*_TIMING.latest_arrival_around_midnight_minutes, size=n)
    overflow = last_local - (first_local // MINUTES_PER_DAY + 1) * MINUTES_PER_DAY - latest
    late = (overflow > 0) & (hour <= _TIMING.same_day_last_first_hour) & (
        rng.random(n) < _TIMING.same_day_arrival_rate
    )
    overnight = late & (segments.last > segments.first) & (
        rng.random(n) < _TIMING.overnight_connection_rate
    )
    _wait_overnight(rng, network, segments, arr_node, arr, layover, overnight)
    return _tighten(segments, dep0, first_local, layover, overflow, late & ~overnight)


def _wait_overnight(rng, network, segments: _Segments, arr_node, arr, layover, rows) -> None:
    """Make the last connection of `rows` leave the next morning."""
    last = segments.last[rows]
    before = last - 1  # the segment that lands at the connecting airport
    landed = arr[before] + network.offset_at(arr_node[before], arr[before])
    morning = rng.integers(*_TIMING.overnight_departure_minutes, size=len(last))
    departs = landed // MINUTES_PER_DAY * MINUTES_PER_DAY + morning
    departs = np.where(departs < landed + _TIMING.layover_minutes_min,
                       departs + MINUTES_PER_DAY, departs)
    layover[last] = departs - landed


def _tighten(segments: _Segments, dep0, first_local, layover, overflow, rows) -> np.ndarray:
    """Cut the layovers of `rows` by up to their overflow, then leave earlier by the rest."""
    spare = layover - _TIMING.layover_minutes_min
    spare[segments.first] = 0
    reducible = np.add.reduceat(spare, segments.first)
    cut = np.where(rows, np.minimum(overflow, reducible), 0)
    share = cut / np.maximum(reducible, 1)
    layover -= np.rint(spare * share[segments.row]).astype(np.int64)
    earliest = first_local // MINUTES_PER_DAY * MINUTES_PER_DAY + 60 * _TIMING.first_hour_min
    earlier = np.minimum(overflow - cut, first_local - earliest)
    return dep0 - np.where(rows, np.maximum(earlier, 0), 0)


def draw_schedule(rng, network: Network, dep_node, arr_node, segment_count,
                  flight_day) -> Schedule:
    """Times of every segment of rows flying on `flight_day` (days since EPOCH0)."""
    segments = _Segments.of(segment_count)
    hour, dep0 = _draw_first_departure(rng, network, dep_node[segments.first], segment_count,
                                       flight_day)
    miles, block = _block_minutes(rng, network, dep_node, arr_node)
    median = _TIMING.layover_median_minutes * np.interp(hour, _LAYOVER_FACTOR_HOURS,
                                                        _LAYOVER_FACTORS)
    layover = np.rint(
        median[segments.row] * np.exp(rng.normal(0.0, _TIMING.layover_sigma, len(miles)))
    ).astype(np.int64)
    layover = np.clip(layover, _TIMING.layover_minutes_min, _TIMING.layover_minutes_max)
    layover[segments.first] = 0
    first_node = dep_node[segments.first]
    first_local = dep0 + network.offset_at(first_node, dep0)
    dep0 = _fit_in_the_day(rng, network, segments, arr_node, hour, dep0, first_local, layover,
                           block)
    first_local = dep0 + network.offset_at(first_node, dep0)
    dep, arr = _chain(segments, dep0, layover, block)
    dep_offset = network.offset_at(dep_node, dep)
    arr_offset = network.offset_at(arr_node, arr)
    local_flight_day = first_local // MINUTES_PER_DAY
    last = segments.last
    return Schedule(
        dep_utc_minute=dep,
        arr_utc_minute=arr,
        dep_offset_minutes=dep_offset,
        arr_offset_minutes=arr_offset,
        miles=miles,
        flight_day=local_flight_day,
        travel_minutes=arr[last] - dep0,
        elapsed_days=(arr[last] + arr_offset[last]) // MINUTES_PER_DAY - local_flight_day,
    )
