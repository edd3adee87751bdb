"""The benchmarks' Spark-on-CSV path (scripts/bench/spark_csv.py): its readers (RFC-4180
quoting, byte-order marks, `\\N` nulls, ragged rows) and Q1-Q4 from them against the oracle."""

from __future__ import annotations

import csv

import pytest

from oracle import reference
from oracle.result_compare import assert_all_results
from scripts.bench.spark_csv import compute_all, read_airports_csv, read_flights_csv
from tests.unit.spark.rules.spark_test_frames import collected

HEADER = ["legId", "searchDate", "startingAirport", "destinationAirport", "travelDuration",
          "totalFare", "totalTravelDistance", "segmentsArrivalAirportCode",
          "segmentsAirlineName"]
FLIGHT_ROWS = [
    ["plain", "2022-04-16", "ATL", "BOS", "PT2H30M", "248.60", "947", "BOS", "Delta"],
    ['quoted,"leg"', "2022-04-16", "ATL", "BOS", "PT2H30M", "100", "", "BOS", "A, B"],
    ["four", "2022-04-16", "BOS", "ATL", "PT9H", "300.5", "",
     "JFK||ORD||LAX||ATL", 'Delta||"United"||Delta||Delta'],
    ["duplicate", "2022-04-16", "ATL", "BOS", "PT1H", "99", "4000", "BOS", "Delta"],
    ["duplicate", "2022-04-16", "ATL", "BOS", "PT1H", "99", "4000", "BOS", "Delta"],
]
AIRPORTS_TEXT = (
    "\ufeffAirport Code;Airport Name;Latitude;Longitude;City Name geo_name_id\r\n"
    "ATL;Atlanta;33.636667;-84.428056;\\N\r\n"
    "BOS;Boston Logan;42.363056;-71.0;4930956\r\n"
    "JFK;\"Kennedy; New York\";40.633333;-73.783333;\\N\r\n"
    "ORD;O'Hare;\\N;-87.904722;\\N\r\n"
    "LAX;Los Angeles;33.9425;-118.407222;\\N\r\n"
)


@pytest.fixture()
def files(tmp_path):
    flights = tmp_path / "itineraries.csv"
    with open(flights, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(HEADER)
        writer.writerows(FLIGHT_ROWS)
        handle.write("short,2022-04-16,ATL\n")  # too few fields: the rest are null
        handle.write("long,2022-04-16,ATL,BOS,PT1H,5,1,BOS,Delta,surplus\n")  # extra dropped
    airports = tmp_path / "airports.csv"
    airports.write_bytes(AIRPORTS_TEXT.encode("utf-8"))
    return flights, airports


def test_flights_fields_are_strings_by_header_with_rfc4180_quoting(spark, files):
    frame = read_flights_csv(spark, str(files[0]))
    assert frame.columns == HEADER
    assert {field.dataType.simpleString() for field in frame.schema.fields} == {"string"}
    rows = {row["legId"]: row.asDict() for row in frame.collect()}
    assert rows['quoted,"leg"']["segmentsAirlineName"] == "A, B"
    assert rows["four"]["segmentsAirlineName"] == 'Delta||"United"||Delta||Delta'
    assert rows["plain"]["totalFare"] == "248.60"
    assert rows["short"]["totalFare"] is None
    assert rows["long"]["segmentsAirlineName"] == "Delta"


def test_airports_without_byte_order_mark_and_with_nulls(spark, files):
    frame = read_airports_csv(spark, str(files[1]))
    assert frame.columns[0] == "Airport Code"
    rows = {row["Airport Code"]: row.asDict() for row in frame.collect()}
    assert rows["JFK"]["Airport Name"] == "Kennedy; New York"
    assert rows["ORD"]["Latitude"] is None
    assert rows["BOS"]["City Name geo_name_id"] == "4930956"
    assert rows["ATL"]["City Name geo_name_id"] is None


def test_spark_reads_the_files_as_the_reference_does(spark, files):
    flights, airports = files
    expected = reference.compute_files(flights, airports)
    results = compute_all(read_flights_csv(spark, str(flights)),
                          read_airports_csv(spark, str(airports)))
    try:
        assert_all_results(collected(results), expected.by_query())
        assert results.invalid_counts == expected.invalid_counts
        assert (results.rows, results.q2_skipped) == (expected.rows, expected.q2_skipped)
    finally:
        results.release()
    assert expected.rows == len(FLIGHT_ROWS) + 2
    assert expected.q1 and expected.q2 and expected.q4
