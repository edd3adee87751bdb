"""spark/rules/airport_distances.py: the workers' great-circle miles (no Spark): the reference's
distances, legs summed in order bit for bit, unknown airports NaN, and the coordinates' JSON."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from oracle import reference
from spark.rules.airport_distances import (
    AirportCoordinates,
    AirportCoordinatesError,
    AirportTable,
    haversine_miles,
    sums_in_order,
)
from spark.rules.route_id import airport_code_number

AIRPORTS = {"ATL": (33.6367, -84.4281), "BOS": (42.3643, -71.0052),
            "NOR": (90.0, 0.0), "SOU": (-90.0, 0.0), "x|y": (1.5, 2.5)}


def test_haversine_is_the_reference_distance_and_nan_stays_nan():
    pairs = [("ATL", "BOS"), ("BOS", "ATL"), ("ATL", "ATL"), ("NOR", "SOU"), ("x|y", "ATL")]
    starts = [AIRPORTS[a] for a, _ in pairs]
    ends = [AIRPORTS[b] for _, b in pairs]
    found = haversine_miles(*(np.array([place[axis] for place in places])
                              for places in (starts, ends) for axis in (0, 1)))
    expected = [reference.haversine_miles(AIRPORTS[a], AIRPORTS[b]) for a, b in pairs]
    assert found[2] == 0.0
    assert math.isclose(found[3], math.pi * 3958.8, rel_tol=1e-15)  # pole to pole: no NaN
    for got, want in zip(found, expected, strict=True):
        assert math.isclose(got, want, rel_tol=1e-13, abs_tol=1e-9), (got, want)
    assert np.isnan(haversine_miles([math.nan], [0.0], [1.0], [1.0])).all()


def test_lookups_by_text_and_by_code_number():
    table = AirportTable(AirportCoordinates(AIRPORTS))
    lat, lon = table.locate(pa.array(["BOS", "JFK", None, "x|y", ""]))
    assert lat[0] == 42.3643 and lon[3] == 2.5
    assert np.isnan(lat[[1, 2, 4]]).all() and np.isnan(lon[[1, 2, 4]]).all()
    numbers = np.array([airport_code_number("ATL"), airport_code_number("JFK")])
    lat, lon = table.locate_numbers(numbers)
    assert (lat[0], lon[0]) == AIRPORTS["ATL"] and np.isnan(lat[1]) and np.isnan(lon[1])


def test_chain_miles_sums_each_rows_legs_from_its_origin():
    table = AirportTable(AirportCoordinates(AIRPORTS))
    arrivals = pa.array([["BOS"], ["BOS", "ATL", "x|y"], ["JFK", "BOS"], ["ATL"]])
    found = table.chain_miles(pa.array(["ATL", "ATL", "ATL", "BOS"]), arrivals.slice(0))
    row = reference._ValidRow("l", "ATL", "x|y", "PT1H", 60, 1.0, ["BOS", "ATL", "x|y"], None)
    assert math.isclose(found[1], reference._chain_miles(row, AIRPORTS), rel_tol=1e-12)
    assert np.isnan(found[2])  # JFK is unknown
    assert math.isclose(found[0], found[3], rel_tol=1e-15)
    # A sliced list array (offsets not from 0), as `take` and batches may give.
    sliced = table.chain_miles(pa.array(["ATL", "BOS"]), arrivals.slice(2))
    assert np.isnan(sliced[0]) and sliced[1] == found[3]


@given(st.lists(st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False),
                         min_size=1, max_size=40), max_size=30))
def test_sums_in_order_are_a_python_loop_bit_for_bit(segments):
    values = np.array([value for segment in segments for value in segment])
    offsets = np.cumsum([0, *(len(segment) for segment in segments)])
    found = sums_in_order(values, offsets)
    for got, segment in zip(found, segments, strict=True):
        total = 0.0
        for value in segment:
            total += value
        assert got == total


def test_a_hostile_chain_costs_its_length_not_its_length_times_the_rows():
    lengths = [100_000, 99_999] + [1] * 100_000
    offsets = np.cumsum([0, *lengths])
    values = np.full(offsets[-1], 0.1)
    found = sums_in_order(values, offsets)
    total = 0.0
    for value in values[:100_000]:
        total += value
    assert found[0] == total and (found[2:] == 0.1).all()


def test_coordinates_round_trip_through_json_exactly():
    coordinates = AirportCoordinates({"ATL": (33.6367, -84.4281), "Q": (0.1 + 0.2, -1e-300)})
    assert AirportCoordinates.from_json(coordinates.to_json()) == coordinates


@pytest.mark.parametrize("text", ["not json", "[]", '{"ATL": [1]}', '{"ATL": [1, "2"]}',
                                  '{"ATL": [1, true]}', '{"ATL": [1, NaN]}',
                                  '{"ATL": [1, Infinity]}'])
def test_malformed_coordinates_are_a_named_error(text):
    with pytest.raises(AirportCoordinatesError):
        AirportCoordinates.from_json(text)
