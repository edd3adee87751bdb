"""spark/flight_fields.py, the columnar derivation of the query fields (no Spark): the same
hand-worked values as Spark's expressions, and row by row the plain-Python reference's
classification on random rows built from the characters the rules care about."""

from __future__ import annotations

import math

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from spark.flight_fields import DERIVED_SCHEMA, derive, duration_minutes, parse_number
from spark.queries import FLIGHT_COLUMNS
from tests import reference_queries as reference
from tests.unit.spark.test_spark_query_expressions import DURATIONS, NUMBERS


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


def _expected(row: dict) -> dict:
    """The derived row the reference's classification implies."""
    classified = reference.classify(row)
    empty = {name: None for name in DERIVED_SCHEMA.names}
    if isinstance(classified, str):
        return {**empty, "invalid_kind": classified, "legId": row["legId"],
                "startingAirport": row["startingAirport"],
                "destinationAirport": row["destinationAirport"]}
    count = len(classified.arrivals) - 1
    q1_row = count >= 3
    return {
        **empty,
        "legId": classified.leg_id,
        "startingAirport": classified.origin,
        "destinationAirport": classified.destination,
        "travelDuration": classified.travel_duration if q1_row else None,
        "totalFare": classified.fare,
        "duration_minutes": classified.minutes,
        "stopover_count": count,
        "stopovers": classified.stopovers if q1_row else None,
        "given_miles": classified.given_distance,
        "chain": ([classified.origin, *classified.arrivals]
                  if classified.given_distance is None else None),
    }


def _row(leg_id: str, fare: str, distance: str, arrivals: str = "BOS",
         duration: str = "PT1H") -> dict:
    """An ATL-BOS flight row."""
    return {"legId": leg_id, "startingAirport": "ATL", "destinationAirport": "BOS",
            "travelDuration": duration, "totalFare": fare, "totalTravelDistance": distance,
            "segmentsArrivalAirportCode": arrivals}


def test_hand_worked_rows():
    rows = [
        _row("a", "+7", "0", arrivals="A|||B||C||D", duration="P1DT2H5M30S"),
        _row("", "1", "5"),
        _row("c", "1e400", "5"),
        _row("d", "1", "1e400"),
    ]
    derived = derive(_table(rows)).to_pylist()
    assert derived[0]["stopovers"] == "A|||B||C"  # split left to right: "A", "|B", "C", "D"
    assert derived[0]["chain"] == ["ATL", "A", "|B", "C", "D"]
    assert derived[0]["duration_minutes"] == 1565 and derived[0]["totalFare"] == 7.0
    assert derived[1]["invalid_kind"] == "empty_leg_id"
    assert derived[2]["invalid_kind"] == "bad_fare"
    assert derived[3]["given_miles"] is None and derived[3]["chain"] == ["ATL", "BOS"]
    assert derived == [_expected(row) for row in rows]


def test_an_empty_table_keeps_the_schema():
    assert derive(_table([])).schema == DERIVED_SCHEMA


_CODES = st.sampled_from(["ATL", "BOS", "JFK", "", "AT", "atl", "ATLX", "A1C", None])
_DURATIONS = st.one_of(st.sampled_from(list(DURATIONS)),
                       st.text(alphabet="PTDHMS0123456789", max_size=12))
_NUMBERS = st.one_of(st.sampled_from(list(NUMBERS)), st.text(alphabet="0123456789.eE+- ",
                                                             max_size=10))
_ARRIVALS = st.one_of(st.none(), st.lists(st.sampled_from(["BOS", "ORD", "", "|", "X|Y"]),
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
    assert derive(_table(rows)).to_pylist() == [_expected(row) for row in rows]
