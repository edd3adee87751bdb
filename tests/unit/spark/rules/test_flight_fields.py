"""spark/rules/flight_fields.py, the columnar derivation of the query fields (no Spark): the same
hand-worked values as Spark's expressions, and row by row the plain-Python reference's
classification and Q2 rule on random rows built from the characters the rules care about."""

from __future__ import annotations

import math

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from oracle import reference
from spark.rules.airport_distances import AirportCoordinates, haversine_miles
from spark.rules.contract import FLIGHT_COLUMNS
from spark.rules.flight_fields import DERIVED_SCHEMA, derive, duration_minutes, parse_number
from spark.rules.route_id import AIRPORT_CODES, airport_code_number, route_of
from tests.unit.spark.rules.test_spark_query_expressions import DURATIONS, NUMBERS


def _texts(values) -> pa.Array:
    return pa.array(list(values), pa.string())


def test_duration_minutes_as_spark_and_the_reference():
    ok, minutes = duration_minutes(_texts(DURATIONS))
    found = dict(zip(DURATIONS, minutes.to_pylist(), strict=True))
    assert found == DURATIONS
    assert ok.to_pylist() == [value is not None for value in DURATIONS.values()]


def test_parse_number_takes_plain_decimals_and_keeps_an_overflow_infinite():
    found = dict(zip(NUMBERS, parse_number(_texts(NUMBERS)).to_pylist(), strict=True))
    assert math.isinf(found.pop("1e400"))  # as Spark: the finiteness rules refuse it
    assert found == {text: value for text, value in NUMBERS.items() if text != "1e400"}


def _table(rows: list[dict]) -> pa.Table:
    return pa.table({name: pa.array([row.get(name) for row in rows], pa.string())
                     for name in FLIGHT_COLUMNS})


# JFK is left out: a valid JFK row is one Q2 skips.
AIRPORTS = {"ATL": (33.6367, -84.4281), "BOS": (42.3643, -71.0052), "ORD": (41.9786, -87.9048)}
AIRPORTS_JSON = AirportCoordinates(AIRPORTS).to_json()


def _derive(rows: list[dict]) -> list[dict]:
    return derive(_table(rows), AIRPORTS_JSON).to_pylist()


def _expected(row: dict) -> dict:
    """The derived row the reference's classification and Q2 rule imply."""
    classified = reference.classify(row)
    empty = {name: None for name in DERIVED_SCHEMA.names}
    if isinstance(classified, str):
        return {**empty, "invalid_kind": classified}
    q1_row = len(classified.arrivals) - 1 >= 3
    known = classified.origin in AIRPORTS and classified.destination in AIRPORTS
    q2_total = None
    if known:
        direct = reference.haversine_miles(AIRPORTS[classified.origin],
                                           AIRPORTS[classified.destination])
        total = classified.given_distance
        if total is None:
            total = reference._chain_miles(classified, AIRPORTS)
        if total is not None and total > 4 * direct:
            q2_total = total
    return {
        **empty,
        "route_id": (airport_code_number(classified.origin) * AIRPORT_CODES
                     + airport_code_number(classified.destination)),
        "totalFare": classified.fare,
        "endpoints_known": known,
        "legId": classified.leg_id if q1_row or q2_total is not None else None,
        "travelDuration": classified.travel_duration if q1_row else None,
        "duration_minutes": classified.minutes if q1_row else None,
        "stopovers": classified.stopovers if q1_row else None,
        "totalDistance": q2_total,
    }


def _assert_rows_equal(found: list[dict], expected: list[dict]) -> None:
    """Equal, but for the summed distances: the same formula as the reference's in another
    order of operations, so within a few units in the last place."""
    assert len(found) == len(expected)
    for got, want in zip(found, expected, strict=True):
        got, want = dict(got), dict(want)
        distances = got.pop("totalDistance"), want.pop("totalDistance")
        assert got == want
        assert (distances[0] is None) == (distances[1] is None), distances
        if distances[0] is not None:
            assert math.isclose(*distances, rel_tol=1e-12), distances


def _row(leg_id: str, fare: str, distance: str, arrivals: str = "BOS",
         duration: str = "PT1H", origin: str = "ATL") -> dict:
    """An <origin>-BOS flight row."""
    return {"legId": leg_id, "startingAirport": origin, "destinationAirport": "BOS",
            "travelDuration": duration, "totalFare": fare, "totalTravelDistance": distance,
            "segmentsArrivalAirportCode": arrivals}


def test_hand_worked_rows():
    atl_bos = reference.haversine_miles(AIRPORTS["ATL"], AIRPORTS["BOS"])  # ~946 miles
    by_legs = sum(reference.haversine_miles(AIRPORTS[a], AIRPORTS[b]) for a, b in
                  [("ATL", "ORD"), ("ORD", "ATL")] * 3 + [("ATL", "ORD"), ("ORD", "BOS")])
    rows = [
        _row("a", "+7", "0", arrivals="A|||B||C||D", duration="P1DT2H5M30S"),
        _row("", "1", "5"),
        _row("c", "1e400", "5"),
        _row("d", "1", "1e400"),
        _row("e", "2", "12000"),  # a given detour
        _row("f", "3", "", arrivals="ORD||ATL||ORD||ATL||ORD||ATL||ORD||BOS"),  # by legs
        _row("g", "4", "", arrivals="ORD||BOS"),  # by its legs, no detour
        _row("h", "5", "12000", origin="JFK"),  # an origin missing from the airports
    ]
    derived = _derive(rows)
    assert derived[0]["stopovers"] == "A|||B||C"  # split left to right: "A", "|B", "C", "D"
    assert derived[0]["duration_minutes"] == 1565 and derived[0]["totalFare"] == 7.0
    assert derived[0]["totalDistance"] is None  # its chain's airports are unknown
    assert derived[0]["legId"] == "a" and route_of(derived[0]["route_id"]) == "ATL-BOS"
    assert derived[1]["invalid_kind"] == "empty_leg_id" and derived[1]["route_id"] is None
    assert derived[2]["invalid_kind"] == "bad_fare"
    assert derived[3]["totalDistance"] is None and derived[3]["legId"] is None
    assert derived[4]["totalDistance"] == 12000.0 and derived[4]["legId"] == "e"
    assert by_legs > 4 * atl_bos
    assert math.isclose(derived[5]["totalDistance"], by_legs, rel_tol=1e-12)
    assert derived[5]["stopovers"] == "ORD||ATL||ORD||ATL||ORD||ATL||ORD"
    assert derived[6]["totalDistance"] is None and derived[6]["legId"] is None
    assert derived[7]["endpoints_known"] is False and derived[7]["totalDistance"] is None
    assert all(row["endpoints_known"] for row in derived[3:7])
    _assert_rows_equal(derived, [_expected(row) for row in rows])


def test_an_empty_table_keeps_the_schema():
    assert derive(_table([]), AIRPORTS_JSON).schema == DERIVED_SCHEMA


_CODES = st.sampled_from(["ATL", "BOS", "JFK", "ORD", "", "AT", "atl", "ATLX", "A1C", None])
_DURATIONS = st.one_of(st.sampled_from(list(DURATIONS)),
                       st.text(alphabet="PTDHMS0123456789", max_size=12))
_NUMBERS = st.one_of(st.sampled_from(list(NUMBERS)), st.text(alphabet="0123456789.eE+- ",
                                                             max_size=10))
_ARRIVALS = st.one_of(st.none(), st.lists(st.sampled_from(["BOS", "ORD", "ATL", "", "|", "X|Y"]),
                                          max_size=6).map("||".join))


@given(st.lists(st.fixed_dictionaries({
    "legId": st.sampled_from(["a", "b", "", None]),
    "startingAirport": _CODES,
    "destinationAirport": _CODES,
    "travelDuration": _DURATIONS,
    "totalFare": _NUMBERS,
    "totalTravelDistance": _NUMBERS,
    "segmentsArrivalAirportCode": _ARRIVALS,
}), max_size=30))
def test_random_rows_derive_as_the_reference_classifies_them(rows):
    _assert_rows_equal(_derive(rows), [_expected(row) for row in rows])


# A chain far longer than 4 x ATL-BOS (test_hand_worked_rows works it out).
_DETOUR_ARRIVALS = "ORD||ATL||ORD||ATL||ORD||ATL||ORD||BOS"


def test_a_row_exactly_on_q2s_boundary_is_no_q2_row():
    """docs/queries.md: Q2 wants total_distance > 4 * direct_distance, strictly."""
    atl_bos = reference.haversine_miles(AIRPORTS["ATL"], AIRPORTS["BOS"])
    (atl_lat, atl_lon), (bos_lat, bos_lon) = AIRPORTS["ATL"], AIRPORTS["BOS"]
    columnar = haversine_miles([atl_lat], [atl_lon], [bos_lat], [bos_lon])[0]
    assert columnar == atl_bos  # both paths' direct distance, to the bit: the row is on the bar
    on_the_bar = repr(4 * atl_bos)  # times 4 is exact; repr round-trips the double
    assert float(on_the_bar) == 4 * atl_bos
    rows = [
        # A zero-length chain: total 0 by its one leg, direct 0.
        {**_row("same", "1", "", arrivals="ATL"), "destinationAirport": "ATL"},
        _row("given", "1", on_the_bar),
        _row("above", "1", repr(math.nextafter(4 * atl_bos, math.inf))),
    ]
    derived = _derive(rows)
    assert [row["endpoints_known"] for row in derived] == [True, True, True]
    assert [row["totalDistance"] for row in derived] == [None, None,
                                                         math.nextafter(4 * atl_bos, math.inf)]
    assert [row["legId"] for row in derived] == [None, None, "above"]
    _assert_rows_equal(derived, [_expected(row) for row in rows])


def test_a_given_distance_counts_only_above_zero_else_the_legs_are_summed():
    """docs/queries.md: total_distance is totalTravelDistance when present and > 0, otherwise
    the legs' sum; on a detour chain only the given distances that count keep it off Q2."""
    rows = [_row(distance, "1", distance, arrivals=_DETOUR_ARRIVALS)
            for distance in ["0", "-0", "-0.5", "0.5", "1"]]
    derived = _derive(rows)
    assert all(row["invalid_kind"] is None and row["endpoints_known"] for row in derived)
    summed = {row["legId"] for row in derived if row["totalDistance"] is not None}
    assert summed == {"0", "-0", "-0.5"}
    _assert_rows_equal(derived, [_expected(row) for row in rows])


def test_only_a_negative_fare_is_a_bad_fare():
    """docs/queries.md: totalFare parses as a finite number >= 0."""
    fares = ["-0.5", "-1", "-0.0001", "-0", "0", "0.5"]
    rows = [_row(fare, fare, "5") for fare in fares]
    derived = _derive(rows)
    assert [row["invalid_kind"] for row in derived] == ["bad_fare"] * 3 + [None] * 3
    _assert_rows_equal(derived, [_expected(row) for row in rows])


def test_three_segments_are_two_stopovers_and_no_q1_row():
    """docs/queries.md: stopover_count is the number of segments minus 1; Q1 wants >= 3."""
    rows = [_row(arrivals, "1", "5", arrivals=arrivals)
            for arrivals in ["ORD||ATL||BOS", "ORD||ATL||ORD||BOS"]]
    derived = _derive(rows)
    assert [row["stopovers"] for row in derived] == [None, "ORD||ATL||ORD"]
    assert [row["duration_minutes"] for row in derived] == [None, 60]
    _assert_rows_equal(derived, [_expected(row) for row in rows])
