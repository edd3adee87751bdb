"""scripts/bench_duckdb.py: DuckDB's Q1-Q4 equal the plain-Python reference, row for row.

Two inputs: a generated dataset with malformed rows of every kind the generator makes, and a
hand-written pair of files holding the edge cases of the CSV layouts and of each rule of
docs/queries.md (quoting, line breaks inside quoted fields, short and long rows, number and
duration syntax, unknown and duplicate airports, the airports file's BOM, `\\N` and CRLF).
Results are compared as multisets with oracle/result_compare.py (1e-9 relative on numbers).
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from pathlib import Path

import pytest

from common.flights.result_csv import QUERY_HEADERS
from oracle import reference
from oracle.duckdb_queries import (
    INVALID_KINDS,
    ArgumentError,
    MissingColumnsError,
    MissingInputFileError,
    duckdb_queries,
)
from oracle.result_compare import assert_all_results, assert_same_results
from scripts import bench_duckdb
from scripts.datagen.generate import generate

GENERATED_ROWS = 20_000
INVALID_RATE = 0.05
SEED = 11

# Not the Kaggle order, with columns the queries ignore: columns are found by name.
# `expected_kind` is such an ignored column; the tests read it to know what each row tests.
FLIGHT_HEADER = (
    "searchDate", "segmentsArrivalAirportCode", "legId", "totalFare", "fareBasisCode",
    "startingAirport", "destinationAirport", "travelDuration", "totalTravelDistance",
    "segmentsAirlineName", "expected_kind",
)

AIRPORT_HEADER = ("Airport Code", "Airport Name", "Latitude", "Longitude", "coordinates")
AIRPORT_ROWS = [
    ("ATL", "Hartsfield; Jackson", "33.636667", "-84.428056"),  # ';' inside a quoted field
    ("BOS", "Logan", "42.363056", "-71.0"),
    ("ORD", "O'Hare", "41.978611", "-87.904722"),
    ("DEN", '"Denver" International', "39.861667", "-104.673056"),  # doubled quotes
    ("LAX", "Los Angeles", "33.9425", "-118.407222"),
    ("SEA", "Seattle", "47.448889", "-122.309444"),
    ("MIA", "Miami", "25.783333", "-80.266667"),
    ("DFW", "Dallas", "32.896944", "-97.038056"),
    ("DAL", "Love Field", "32.852778", "-96.85"),
    ("PHX", "Phoenix", "33.433333", "-112.033333"),
    ("JFK", "Kennedy", "40.633333", "-73.783333"),
    ("LGA", "LaGuardia", "40.766667", "-73.866667"),
    ("JFX", "at JFK's coordinates", "40.633333", "-73.783333"),  # JFK-JFX: 0 miles direct
    ("NUL", "null latitude", "\\N", "-73.0"),  # `\N`: not a known airport
    ("NAN", "garbage latitude", "north", "-73.0"),
    ("INF", "infinite latitude", "1e400", "-73.0"),
    ("\\N", "no code", "10.0", "10.0"),
    # Listed twice: the smaller (lat, lon), next to ATL, wins over the one next to SEA.
    ("DUP", "far", "47.45", "-122.31"),
    ("DUP", "near", "33.64", "-84.43"),
]


def flight(leg_id, route, duration, fare, arrivals, distance="", kind="valid", **extra):
    origin, destination = route.split("-")
    row = {
        "searchDate": "2022-04-16", "segmentsArrivalAirportCode": arrivals, "legId": leg_id,
        "totalFare": fare, "fareBasisCode": "KAUOA0MQ", "startingAirport": origin,
        "destinationAirport": destination, "travelDuration": duration,
        "totalTravelDistance": distance, "segmentsAirlineName": "Delta, Inc.||Delta",
        "expected_kind": kind,
    }
    row.update(extra)
    return row


def bad(kind, **fields):
    return flight("bad", "ATL-BOS", "PT3H", "200", "BOS", "946", kind=kind, **fields)


VALID_ROWS = [
    # Q3 ties on ATL-BOS at 600 minutes: legId, then the fare, decide.
    flight("a", "ATL-BOS", "PT10H", "500", "ORD||DEN||LAX||BOS"),
    flight("a", "ATL-BOS", "PT10H", "400", "SEA||DEN||LAX||BOS", "1000"),
    flight("a", "ATL-BOS", "PT10H", "600", "DEN||DEN||DEN||BOS", "1000"),
    flight("b", "ATL-BOS", "PT10H", "1", "MIA||MIA||MIA||BOS", "1000"),
    # Q3 by minutes, not by text; seconds floored to minutes.
    flight("d_1459", "DEN-MIA", "P1DT19M", "300", "ATL||ORD||BOS||MIA", "3000"),
    flight("d_58", "DEN-MIA", "PT58M", "300", "ATL||ORD||BOS||MIA", "3000"),
    flight("d_59", "DEN-MIA", "PT58M119S", "300", "ATL||ORD||BOS||MIA", "3000"),
    flight("d_420", "DEN-MIA", "PT7H", "300", "ATL||ORD||BOS||MIA", "3000"),
    flight("d_1440", "DEN-MIA", "P1D", "300", "ATL||ORD||BOS||MIA", "3000"),
    flight("d_1565", "DEN-MIA", "P1DT2H5M", "300", "ATL||ORD||BOS||MIA", "3000"),
    # Number syntax: all of these are plain decimal literals.
    flight("fare_exp", "SEA-JFK", "PT10H", "1e3", "ORD||DEN||ATL||BOS||JFK", "3000"),
    flight("fare_plus", "SEA-JFK", "PT9H", "+7", "ORD||DEN||ATL||BOS||JFK", "3000"),
    flight("fare_dot", "SEA-JFK", "P1D", ".5", "ORD||DEN||ATL||BOS||JFK", "3000"),
    flight("fare_trailing_dot", "SEA-JFK", "PT5H", "1.", "ORD||DEN||ATL||BOS||JFK", "3000"),
    flight("fare_minus_zero", "SEA-JFK", "PT5H", "-0", "ORD||DEN||ATL||BOS||JFK", "3000"),
    # A comma inside quoted fields, and a line break kept inside a legId (not a rule).
    flight("q,1", "LAX-BOS", "PT8H", "300", "ORD||DEN||SEA||BOS", "3000"),
    flight("nl\n", "LAX-BOS", "PT8H", "300", "ORD||DEN||SEA||BOS", "3000"),
    flight("\\N", "LAX-BOS", "PT8H", "300", "ORD||DEN||SEA||BOS", "\\N"),  # text, not null
    flight("two_stops", "ATL-BOS", "PT5H", "250", "ORD||DEN||BOS", "1000"),
    # Q2 on ATL-BOS (direct 945.6 miles): given distances, else the chain's legs.
    flight("q2_given_far", "ATL-BOS", "PT3H", "200", "BOS", "5000"),
    flight("given_near", "ATL-BOS", "PT3H", "200", "BOS", "1000"),
    flight("q2_missing_distance", "ATL-BOS", "PT9H", "200", "LAX||SEA||BOS"),
    flight("q2_zero_distance", "ATL-BOS", "PT9H", "200", "LAX||SEA||BOS", "0"),
    flight("q2_negative_distance", "ATL-BOS", "PT9H", "200", "LAX||SEA||BOS", "-7"),
    flight("q2_garbage_distance", "ATL-BOS", "PT9H", "200", "LAX||SEA||BOS", "far"),
    flight("q2_infinite_distance", "ATL-BOS", "PT9H", "200", "LAX||SEA||BOS", "1e400"),
    flight("zero_distance_near", "ATL-BOS", "PT3H", "200", "BOS", "0"),
    # Chains through an airport that is not known: distance unknown, not in Q2.
    flight("unknown_in_chain", "ATL-BOS", "PT9H", "200", "XYZ||LAX||BOS"),
    flight("null_coordinate_in_chain", "ATL-BOS", "PT9H", "200", "LAX||NUL||BOS"),
    flight("empty_code_in_chain", "ATL-BOS", "PT9H", "200", "LAX||||BOS"),
    # Origin or destination not known: skipped by Q2 and counted.
    flight("skip_origin", "ZZZ-BOS", "PT9H", "200", "BOS", "99999"),
    flight("skip_destination", "ATL-NAN", "PT9H", "200", "NAN", "99999"),
    flight("skip_infinite", "INF-BOS", "PT9H", "200", "BOS", "99999"),
    # Alternate airports: valid, the route from start/destination.
    flight("q2_alt_far", "LAX-DFW", "PT4H", "180", "DAL", "6000"),
    # BOS-DUP is 945.6 miles with the ATL-side DUP (2489 with the other): 4500 > 4 * 945.6.
    flight("q2_duplicate_airport", "BOS-DUP", "PT3H", "200", "DUP", "4500"),
    flight("q2_jfk_lga", "JFK-LGA", "PT9H", "200", "LAX||LGA"),
    # On the bar, not over it: 0 miles flown, 0 direct, and 0 > 4 * 0 is false (strict).
    flight("on_the_bar_same_airport", "JFK-JFK", "PT1H", "200", "JFK"),
    flight("on_the_bar_twin_airports", "JFK-JFX", "PT1H", "200", "JFX", "0"),
]

INVALID_ROWS = [
    bad("empty_leg_id", legId=""),
    bad("empty_leg_id", legId="", totalFare="x"),  # only the first failing rule counts
    bad("bad_airport_code", startingAirport="atl"),
    bad("bad_airport_code", destinationAirport="BOSX", travelDuration="x"),
    bad("bad_airport_code", startingAirport="ATL\n"),  # line break in a quoted field
    bad("bad_airport_code", destinationAirport=""),
    bad("bad_duration", travelDuration=""),
    bad("bad_duration", travelDuration="P"),
    bad("bad_duration", travelDuration="PT"),
    bad("bad_duration", travelDuration="P1DT"),
    bad("bad_duration", travelDuration="PT5"),
    bad("bad_duration", travelDuration="pt5m"),
    bad("bad_duration", travelDuration="PT1.5H"),
    bad("bad_duration", travelDuration="PT5M5H"),
    bad("bad_duration", travelDuration="PT5M\n"),
    bad("bad_duration", travelDuration="PT1234567890M"),
    bad("bad_duration", travelDuration="P1W"),
    bad("bad_fare", totalFare=""),
    bad("bad_fare", totalFare="-1"),
    bad("bad_fare", totalFare="1.5d"),
    bad("bad_fare", totalFare="Infinity"),
    bad("bad_fare", totalFare="NaN"),
    bad("bad_fare", totalFare="1e400"),
    bad("bad_fare", totalFare=" 12"),
    bad("bad_fare", totalFare="12\n"),
    bad("bad_fare", totalFare="1,234.00"),
    bad("bad_fare", totalFare="0x10"),
    bad("empty_segments", segmentsArrivalAirportCode=""),
]


def _csv_line(fields, quoting=csv.QUOTE_MINIMAL) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n", quoting=quoting).writerow(fields)
    return buffer.getvalue()


def write_edge_files(directory: Path) -> tuple[Path, Path]:
    """The hand-written flights and airports files; returns their paths."""
    lines = [_csv_line(FLIGHT_HEADER)]
    for index, row in enumerate(VALID_ROWS + INVALID_ROWS):
        # Every third row has every field quoted, quotes being optional in RFC-4180.
        quoting = csv.QUOTE_ALL if index % 3 == 0 else csv.QUOTE_MINIMAL
        lines.append(_csv_line([row[name] for name in FLIGHT_HEADER], quoting))
    lines.append("\n")  # a blank line is no row
    # A short row: padded with empty fields, it fails on its empty legId.
    lines.append(_csv_line(["2022-04-16", "BOS"]))
    # A long row: the extra fields are dropped.
    long_row = flight("long_row", "ATL-BOS", "PT3H", "200", "BOS", "946")
    lines.append(_csv_line([long_row[name] for name in FLIGHT_HEADER] + ["extra", "more"]))
    flights = directory / "itineraries.csv"
    flights.write_text("".join(lines), encoding="utf-8", newline="")
    airports = directory / "airports.csv"
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter=";", lineterminator="\r\n")
    writer.writerow(AIRPORT_HEADER)
    for code, name, lat, lon in AIRPORT_ROWS:
        writer.writerow([code, name, lat, lon, f"{lat}, {lon}"])
    airports.write_bytes(b"\xef\xbb\xbf" + buffer.getvalue().encode())
    return flights, airports


@pytest.fixture(scope="module")
def edge_files(tmp_path_factory):
    return write_edge_files(tmp_path_factory.mktemp("edge"))


@pytest.fixture(scope="module")
def edge_run(edge_files):
    return duckdb_queries(*edge_files, threads=2)


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("generated"), GENERATED_ROWS, SEED, INVALID_RATE)


@pytest.fixture(scope="module")
def generated_expected(generated):
    return reference.compute_files(generated.flights_path, generated.airports_path)


def assert_same_counts(run, expected) -> None:
    assert run.invalid_counts == expected.invalid_counts
    assert (run.rows, run.valid_rows, run.q2_skipped) == (
        expected.rows, expected.valid_rows, expected.q2_skipped)
    if expected.mean_fare is None:
        assert run.mean_fare is None
    else:
        assert run.mean_fare == pytest.approx(expected.mean_fare, rel=1e-12)


# --- generated data ---------------------------------------------------------------------------


@pytest.mark.parametrize("threads", [1, 2])
def test_generated_data_equals_reference(generated, generated_expected, threads):
    run = duckdb_queries(generated.flights_path, generated.airports_path, threads=threads)
    assert_all_results(run.results, generated_expected.by_query())
    assert_same_counts(run, generated_expected)
    # Every malformed row the generator made is counted, and the data exercises every query.
    assert sum(run.invalid_counts.values()) == generated.invalid_total > 0
    assert all(run.result_counts().values()), run.result_counts()


# --- hand-written edge cases ------------------------------------------------------------------


def test_edge_files_equal_reference(edge_files, edge_run):
    expected = reference.compute_files(*edge_files)
    assert_all_results(edge_run.results, expected.by_query())
    assert_same_counts(edge_run, expected)


def test_invalid_rows_counted_by_first_failing_rule(edge_run):
    expected = Counter(row["expected_kind"] for row in INVALID_ROWS)
    expected["empty_leg_id"] += 1  # the short row
    assert set(expected) == set(INVALID_KINDS)
    assert edge_run.invalid_counts == dict(expected)
    # The blank line is no row; the long row is one valid row.
    assert edge_run.rows == len(VALID_ROWS) + len(INVALID_ROWS) + 2
    assert edge_run.valid_rows == len(VALID_ROWS) + 1


def test_q1_rows_keep_fares_parsed_and_text_fields_whole(edge_run):
    q1 = edge_run.results["q1"]
    assert ("fare_exp", "SEA-JFK", 1000.0, "ORD||DEN||ATL||BOS") in q1
    assert ("fare_dot", "SEA-JFK", 0.5, "ORD||DEN||ATL||BOS") in q1
    assert ("q,1", "LAX-BOS", 300.0, "ORD||DEN||SEA") in q1
    assert ("nl\n", "LAX-BOS", 300.0, "ORD||DEN||SEA") in q1
    assert ("\\N", "LAX-BOS", 300.0, "ORD||DEN||SEA") in q1
    assert "two_stops" not in {row[0] for row in q1}


def test_q2_distance_rules(edge_run):
    leg_ids = Counter(row[0] for row in edge_run.results["q2"])
    expected = Counter(row["legId"] for row in VALID_ROWS if row["legId"].startswith("q2_"))
    expected["a"] = 1  # the Q1 row ATL-ORD-DEN-LAX-BOS flies 4959 miles, from its legs
    assert leg_ids == expected
    assert edge_run.q2_skipped == 3
    distances = {row[0]: row[2] for row in edge_run.results["q2"]}
    assert distances["q2_given_far"] == 5000.0
    assert distances["q2_missing_distance"] == pytest.approx(5389, rel=1e-3)


def test_q3_two_shortest_per_route_with_ties(edge_run):
    q3 = sorted(edge_run.results["q3"])
    assert ("d_58", "DEN-MIA", "ATL||ORD||BOS", "PT58M") in q3
    assert ("d_59", "DEN-MIA", "ATL||ORD||BOS", "PT58M119S") in q3
    atl_bos = [row for row in q3 if row[1] == "ATL-BOS"]
    # Both legId "a" rows with the smaller fares (400 and 500) beat "b" and the 600 fare.
    assert sorted(row[2] for row in atl_bos) == ["ORD||DEN||LAX", "SEA||DEN||LAX"]


def test_q4_above_the_mean_of_every_valid_row(edge_run):
    fares = [float(row["totalFare"]) for row in VALID_ROWS] + [200.0]  # + the long row
    mean = sum(fares) / len(fares)
    assert edge_run.mean_fare == pytest.approx(mean, rel=1e-12)
    assert {row[0] for row in edge_run.results["q4"]} == {
        row["startingAirport"] + "-" + row["destinationAirport"]
        for row in VALID_ROWS if float(row["totalFare"]) > mean
    }


# --- inputs and command line ------------------------------------------------------------------


def test_header_only_flights_file(tmp_path, edge_files):
    flights = tmp_path / "itineraries.csv"
    flights.write_text(_csv_line(FLIGHT_HEADER), encoding="utf-8")
    run = duckdb_queries(flights, edge_files[1])
    assert (run.rows, run.valid_rows, run.mean_fare) == (0, 0, None)
    assert run.result_counts() == {"q1": 0, "q2": 0, "q3": 0, "q4": 0}


def test_missing_file_is_named(tmp_path, edge_files):
    with pytest.raises(MissingInputFileError, match="nowhere.csv"):
        duckdb_queries(edge_files[0], tmp_path / "nowhere.csv")


def test_missing_column_is_named(tmp_path, edge_files):
    flights = tmp_path / "itineraries.csv"
    header = [name for name in FLIGHT_HEADER if name != "totalFare"]
    flights.write_text(_csv_line(header), encoding="utf-8")
    with pytest.raises(MissingColumnsError, match="totalFare"):
        duckdb_queries(flights, edge_files[1])


def test_threads_below_one_rejected(edge_files):
    with pytest.raises(ArgumentError):
        duckdb_queries(*edge_files, threads=0)


def read_result_file(path: Path, query: str) -> list[list[str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    assert tuple(rows[0]) == QUERY_HEADERS[query]
    return rows[1:]


def test_command_line_prints_one_json_line_and_writes_files(
        tmp_path, capsys, generated, generated_expected):
    out = tmp_path / "out"
    code = bench_duckdb.main(["--data-dir", str(generated.flights_path.parent), "--threads", "1",
                              "--repeats", "2", "--out", str(out)])
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1
    report = json.loads(lines[0])
    expected = generated_expected.by_query()
    assert report["results"] == {query: len(rows) for query, rows in expected.items()}
    assert report["invalid_counts"] == generated_expected.invalid_counts
    assert (report["rows"], report["repeats"], report["threads"]) == (GENERATED_ROWS, 2, 1)
    assert len(report["total_seconds_each"]) == 2
    assert 0 < report["seconds"]["load"] <= report["seconds"]["total"]
    for query, rows in expected.items():
        assert_same_results(query, read_result_file(out / f"{query}.csv", query), rows)
