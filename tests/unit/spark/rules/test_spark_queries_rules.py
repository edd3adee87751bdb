"""Q1-Q4 on hand-written tiny frames: one row or group of rows per rule of docs/queries.md.

Each row's legId names what it exercises; the expectations below follow from the rules and
from the airport coordinates (real ones, from the Opendatahub file), with wide margins.
Spark's output must also equal the plain-Python reference on the same rows.
"""

from __future__ import annotations

from collections import Counter

import pytest

from oracle import reference
from oracle.result_compare import assert_all_results, assert_same_results
from scripts.bench.spark_csv import compute_all
from spark.rules.contract import INVALID_KINDS
from spark.rules.query_frames import MissingColumnsError
from tests.unit.spark.rules.spark_test_frames import collected, compute, string_frame

AIRPORTS = [
    {"Airport Code": "ATL", "Latitude": "33.636667", "Longitude": "-84.428056"},
    {"Airport Code": "BOS", "Latitude": "42.363056", "Longitude": "-71.0"},
    {"Airport Code": "ORD", "Latitude": "41.978611", "Longitude": "-87.904722"},
    {"Airport Code": "DEN", "Latitude": "39.861667", "Longitude": "-104.673056"},
    {"Airport Code": "LAX", "Latitude": "33.9425", "Longitude": "-118.407222"},
    {"Airport Code": "SEA", "Latitude": "47.448889", "Longitude": "-122.309444"},
    {"Airport Code": "MIA", "Latitude": "25.783333", "Longitude": "-80.266667"},
    {"Airport Code": "DFW", "Latitude": "32.896944", "Longitude": "-97.038056"},
    {"Airport Code": "DAL", "Latitude": "32.852778", "Longitude": "-96.85"},
    {"Airport Code": "ONT", "Latitude": "34.056111", "Longitude": "-117.601111"},
    {"Airport Code": "PHX", "Latitude": "33.433333", "Longitude": "-112.033333"},
    {"Airport Code": "JFK", "Latitude": "40.633333", "Longitude": "-73.783333"},
    {"Airport Code": "LGA", "Latitude": "40.766667", "Longitude": "-73.866667"},
    # At JFK's very coordinates: JFK-JFX is 0 miles direct.
    {"Airport Code": "JFX", "Latitude": "40.633333", "Longitude": "-73.783333"},
    # Listed with a null latitude (`\N` in the file): not a known airport.
    {"Airport Code": "NUL", "Latitude": None, "Longitude": "-73.0"},
    # Listed twice: the smaller (lat, lon), next to ATL, wins over the one next to SEA.
    {"Airport Code": "DUP", "Latitude": "47.45", "Longitude": "-122.31"},
    {"Airport Code": "DUP", "Latitude": "33.64", "Longitude": "-84.43"},
]

# Columns the queries ignore; they must pass through harmlessly.
EXTRAS = {"client_id": "c-1", "message_id": "7", "row_id": "0", "searchDate": "2022-04-16"}


def flight(leg_id, route, duration, fare, arrivals, distance=None, **extra):
    origin, destination = route.split("-")
    return {
        "legId": leg_id,
        "startingAirport": origin,
        "destinationAirport": destination,
        "travelDuration": duration,
        "totalFare": fare,
        "totalTravelDistance": distance,
        "segmentsArrivalAirportCode": arrivals,
        **EXTRAS,
        **extra,
    }


VALID_ROWS = [
    # Q3 ties on ATL-BOS: four rows of 600 minutes; legId "a" beats "b" whatever the fare, and
    # among the "a" rows the fares 400 and 500 beat 600 whatever the stopovers.
    flight("a", "ATL-BOS", "PT10H", "500", "ORD||DEN||LAX||BOS"),
    flight("a", "ATL-BOS", "PT10H", "400", "SEA||DEN||LAX||BOS", "1000"),
    flight("a", "ATL-BOS", "PT10H", "600", "DEN||DEN||DEN||BOS", "1000"),
    flight("b", "ATL-BOS", "PT10H", "1", "MIA||MIA||MIA||BOS", "1000"),
    flight("0", "ATL-BOS", "PT11H", "1", "JFK||JFK||JFK||BOS", "1000"),
    # Q3 by minutes, not by text: 58 and 420 minutes beat a day and more.
    flight("d_1459", "DEN-MIA", "P1DT19M", "300", "ATL||ORD||BOS||MIA", "3000"),
    flight("d_58", "DEN-MIA", "PT58M", "300", "ATL||ORD||BOS||MIA", "3000"),
    flight("d_420", "DEN-MIA", "PT7H", "300", "ATL||ORD||BOS||MIA", "3000"),
    flight("d_1565", "DEN-MIA", "P1DT2H5M", "300", "ATL||ORD||BOS||MIA", "3000"),
    flight("e_600", "SEA-JFK", "PT10H", "1e2", "ORD||DEN||ATL||BOS||JFK", "3000"),
    flight("e_540", "SEA-JFK", "PT9H", "+7", "ORD||DEN||ATL||BOS||JFK", "3000"),
    flight("e_1440", "SEA-JFK", "P1D", ".5", "ORD||DEN||ATL||BOS||JFK", "3000"),
    # Two stopovers: not Q1.
    flight("two_stops", "ATL-BOS", "PT5H", "250", "ORD||DEN||BOS", "1000"),
    # Q2 on ATL-BOS (direct 945.6 miles; the bar is 3782.5).
    flight("q2_given_far", "ATL-BOS", "PT3H", "200", "BOS", "5000"),
    flight("given_near", "ATL-BOS", "PT3H", "200", "BOS", "1000"),
    # ATL-LAX-SEA-BOS is 5389 miles, from the legs whenever the given distance is not > 0.
    flight("q2_empty_distance", "ATL-BOS", "PT9H", "200", "LAX||SEA||BOS", None),
    flight("q2_blank_distance", "ATL-BOS", "PT9H", "200", "LAX||SEA||BOS", ""),
    flight("q2_zero_distance", "ATL-BOS", "PT9H", "200", "LAX||SEA||BOS", "0"),
    flight("q2_negative_distance", "ATL-BOS", "PT9H", "200", "LAX||SEA||BOS", "-7"),
    flight("q2_garbage_distance", "ATL-BOS", "PT9H", "200", "LAX||SEA||BOS", "far"),
    flight("zero_distance_near", "ATL-BOS", "PT3H", "200", "BOS", "0"),
    # Chains through an airport that is not known: total distance unknown, not counted.
    flight("unknown_in_chain", "ATL-BOS", "PT9H", "200", "XYZ||BOS", ""),
    flight("null_coordinate_in_chain", "ATL-BOS", "PT9H", "200", "NUL||BOS", ""),
    # Origin or destination not known: skipped by Q2 and counted, however far the flight.
    flight("skip_origin", "ZZZ-BOS", "PT9H", "200", "BOS", "99999"),
    flight("skip_destination", "ATL-QQQ", "PT9H", "200", "QQQ", "99999"),
    # Alternate airports (DAL for DFW): valid, route from start/destination.
    flight("alt_near", "LAX-DFW", "PT4H", "180", "PHX||DAL", None,
           segmentsDepartureAirportCode="ONT||PHX"),
    flight("q2_alt_far", "LAX-DFW", "PT4H", "180", "DAL", "6000",
           segmentsDepartureAirportCode="ONT"),
    # BOS-DUP is 945.6 miles with the ATL-side DUP, 2489 with the SEA-side one.
    flight("q2_duplicate_airport", "BOS-DUP", "PT3H", "200", "DUP", "4500"),
    # JFK-LAX-LGA from the legs: 4933 miles against a direct 10.2.
    flight("q2_jfk_lga", "JFK-LGA", "PT9H", "200", "LAX||LGA", None),
    # On the bar, not over it: 0 miles flown, 0 direct, and 0 > 4 * 0 is false (strict).
    flight("on_the_bar_same_airport", "JFK-JFK", "PT1H", "200", "JFK", None),
    flight("on_the_bar_twin_airports", "JFK-JFX", "PT1H", "200", "JFX", "0"),
    # The same itinerary twice (legId is not unique): both rows count everywhere.
    flight("twin", "JFK-LGA", "PT8H", "300", "ORD||DEN||SEA||LGA", "500"),
    flight("twin", "JFK-LGA", "PT8H", "300", "ORD||DEN||SEA||LGA", "500"),
]


def invalid(kind, **fields):
    row = flight("bad", "ATL-BOS", "PT3H", "200", "BOS", "946", **fields)
    row["expected_kind"] = kind  # an extra column, ignored by the queries
    return row


INVALID_ROWS = [
    invalid("empty_leg_id", legId=""),
    invalid("empty_leg_id", legId=None, totalFare="x"),  # only the first failing rule counts
    invalid("bad_airport_code", startingAirport="atl"),
    invalid("bad_airport_code", startingAirport="AT"),
    invalid("bad_airport_code", destinationAirport="BOSX", travelDuration="x"),
    invalid("bad_airport_code", destinationAirport="B0S"),
    invalid("bad_airport_code", destinationAirport=None),
    invalid("bad_duration", travelDuration=""),
    invalid("bad_duration", travelDuration="7H"),
    invalid("bad_duration", travelDuration="P"),
    invalid("bad_duration", travelDuration="PT"),
    invalid("bad_duration", travelDuration="P1DT"),
    invalid("bad_duration", travelDuration="PT5"),
    invalid("bad_duration", travelDuration="pt5m"),
    invalid("bad_duration", travelDuration="PT1.5H"),
    invalid("bad_duration", travelDuration="PT5M5H"),
    invalid("bad_duration", travelDuration="PT5M\n"),
    invalid("bad_duration", travelDuration="PT1234567890M"),
    invalid("bad_fare", totalFare=""),
    invalid("bad_fare", totalFare="-1"),
    invalid("bad_fare", totalFare="abc"),
    invalid("bad_fare", totalFare="1e400"),
    invalid("bad_fare", totalFare="NaN"),
    invalid("bad_fare", totalFare="Infinity"),
    invalid("bad_fare", totalFare="1.5d"),
    invalid("bad_fare", totalFare=" 12"),
    invalid("bad_fare", totalFare="12\n", segmentsArrivalAirportCode=""),
    invalid("empty_segments", segmentsArrivalAirportCode=""),
    invalid("empty_segments", segmentsArrivalAirportCode=None),
]


@pytest.fixture(scope="module")
def tiny(spark, query_path):
    rows = VALID_ROWS + INVALID_ROWS
    results = compute(query_path, spark, string_frame(spark, rows), string_frame(spark, AIRPORTS))
    spark_rows = collected(results)
    yield results, spark_rows, reference.compute(rows, reference.airport_coordinates(AIRPORTS))
    results.release()


def leg_ids(rows):
    return Counter(row[0] for row in rows)


def test_spark_equals_reference_on_tiny_frames(tiny):
    results, spark_rows, expected = tiny
    assert_all_results(spark_rows, expected.by_query())
    assert results.invalid_counts == expected.invalid_counts
    assert (results.rows, results.valid_rows, results.q2_skipped) == (
        expected.rows, expected.valid_rows, expected.q2_skipped)
    assert results.mean_fare == pytest.approx(expected.mean_fare, rel=1e-12)


def test_invalid_rows_counted_by_first_failing_rule(tiny):
    results, _, _ = tiny
    expected = Counter(row["expected_kind"] for row in INVALID_ROWS)
    assert set(expected) == set(INVALID_KINDS)
    assert results.invalid_counts == dict(expected)
    assert results.rows == len(VALID_ROWS) + len(INVALID_ROWS)
    assert results.valid_rows == len(VALID_ROWS)


def test_q1_keeps_three_or_more_stopovers_and_duplicate_leg_ids(tiny):
    _, spark_rows, _ = tiny
    q1 = spark_rows["q1"]
    expected = Counter(row["legId"] for row in VALID_ROWS
                       if row["segmentsArrivalAirportCode"].count("||") >= 3)
    assert leg_ids(q1) == expected
    assert expected["twin"] == 2 and "two_stops" not in expected
    assert ("e_540", "SEA-JFK", 7.0, "ORD||DEN||ATL||BOS") in q1


def test_q2_distance_rules(tiny):
    results, spark_rows, reference_results = tiny
    expected = Counter(row["legId"] for row in VALID_ROWS if row["legId"].startswith("q2_"))
    expected["twin"] = 2
    # Q1 rows that also fly far: "a"/500 goes ATL-ORD-DEN-LAX-BOS (4959 miles, from the legs).
    expected["a"] = 1
    assert leg_ids(spark_rows["q2"]) == expected
    assert leg_ids(reference_results.q2) == expected
    assert results.q2_skipped == 2
    distances = {row[0]: row[2] for row in spark_rows["q2"]}
    assert distances["q2_given_far"] == 5000.0
    assert distances["q2_zero_distance"] == pytest.approx(5389, rel=1e-3)
    assert ("q2_alt_far", "LAX-DFW", 6000.0) in spark_rows["q2"]


def test_q3_two_shortest_per_route_with_tie_breaks(tiny):
    _, spark_rows, _ = tiny
    assert_same_results("q3", spark_rows["q3"], [
        ("a", "ATL-BOS", "SEA||DEN||LAX", "PT10H"),
        ("a", "ATL-BOS", "ORD||DEN||LAX", "PT10H"),
        ("d_58", "DEN-MIA", "ATL||ORD||BOS", "PT58M"),
        ("d_420", "DEN-MIA", "ATL||ORD||BOS", "PT7H"),
        ("e_540", "SEA-JFK", "ORD||DEN||ATL||BOS", "PT9H"),
        ("e_600", "SEA-JFK", "ORD||DEN||ATL||BOS", "PT10H"),
        ("twin", "JFK-LGA", "ORD||DEN||SEA", "PT8H"),
        ("twin", "JFK-LGA", "ORD||DEN||SEA", "PT8H"),
    ])


def test_q4_above_global_mean_is_strict(spark, query_path):
    fares = [("ATL-BOS", "100"), ("ATL-BOS", "200"), ("ATL-BOS", "300"), ("ATL-BOS", "350"),
             ("BOS-ATL", "200"), ("BOS-ATL", "50"), ("JFK-LGA", "200")]
    rows = [flight(f"f{i}", route, "PT3H", fare, "X") for i, (route, fare) in enumerate(fares)]
    results = compute(query_path, spark, string_frame(spark, rows), string_frame(spark, AIRPORTS))
    try:
        assert results.mean_fare == 200.0  # 1400 / 7: every fare of 200 sits on the mean
        assert_same_results("q4", results.q4.collect(), [("ATL-BOS", 325.0, 350.0)])
    finally:
        results.release()


def test_no_rows_gives_empty_results(spark, query_path):
    columns = list(VALID_ROWS[0])
    results = compute(query_path, spark, string_frame(spark, [], columns),
                      string_frame(spark, AIRPORTS))
    try:
        assert (results.rows, results.mean_fare) == (0, None)
        assert all(not rows for rows in collected(results).values())
    finally:
        results.release()


def test_missing_column_is_a_named_error(spark):
    row = dict(VALID_ROWS[0])
    del row["totalFare"]
    with pytest.raises(MissingColumnsError, match="totalFare"):
        compute_all(string_frame(spark, [row]), string_frame(spark, AIRPORTS))
