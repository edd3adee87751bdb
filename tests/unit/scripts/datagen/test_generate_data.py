"""The flight-data generator: layouts, determinism, realism rates, consistency, invalid rows.

Rates are checked on one 50,000-row file against the real-data figures of docs/queries.md, with
tolerances of several standard errors so that a seed change cannot flip a test.
"""

import csv
import io
import math
import re
from collections import Counter
from datetime import date, datetime
from pathlib import Path

import pyarrow.csv as pa_csv
import pytest

from scripts import generate_data
from scripts.datagen import catalog, csv_text, invalid
from scripts.datagen import generate as generate_module
from scripts.datagen.csv_text import iso_duration, quote_needed
from scripts.datagen.generate import GenerationReport, GeneratorArgumentError, generate

FLIGHT_HEADER = [
    "legId", "searchDate", "flightDate", "startingAirport", "destinationAirport",
    "fareBasisCode", "travelDuration", "elapsedDays", "isBasicEconomy", "isRefundable",
    "isNonStop", "baseFare", "totalFare", "seatsRemaining", "totalTravelDistance",
    "segmentsDepartureTimeEpochSeconds", "segmentsDepartureTimeRaw",
    "segmentsArrivalTimeEpochSeconds", "segmentsArrivalTimeRaw", "segmentsArrivalAirportCode",
    "segmentsDepartureAirportCode", "segmentsAirlineName", "segmentsAirlineCode",
    "segmentsEquipmentDescription", "segmentsDurationInSeconds", "segmentsDistance",
    "segmentsCabinCode",
]
AIRPORT_HEADER = [
    "Airport Code", "Airport Name", "City Name", "Country Name", "Country Code", "Latitude",
    "Longitude", "World Area Code", "City Name geo_name_id", "Country Name geo_name_id",
    "coordinates",
]
SEGMENT_COLUMNS = FLIGHT_HEADER[15:]
MAIN_AIRPORTS = {"ATL", "BOS", "CLT", "DEN", "DFW", "DTW", "EWR", "IAD", "JFK", "LAX", "LGA",
                 "MIA", "OAK", "ORD", "PHL", "SFO"}
ALTERNATES = {(main, alt) for main, alt, _ in catalog.ALTERNATE_AIRPORTS}
SAMPLE_ROWS = 50_000
DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?)?")
LOCAL_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:00\.000[-+]\d\d:\d\d")


def read_rows(path: Path) -> list[list[str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.reader(handle))


def as_records(rows: list[list[str]]) -> list[dict[str, str]]:
    header = rows[0]
    return [dict(zip(header, row, strict=True)) for row in rows[1:]]


def duration_minutes(text: str) -> int:
    match = DURATION.fullmatch(text)
    assert match and text not in ("P", "PT"), text
    days, hours, minutes = (int(g) if g else 0 for g in match.groups())
    return days * 1440 + hours * 60 + minutes


def haversine_miles(a: tuple[float, float], b: tuple[float, float]) -> float:
    lat1, lon1, lat2, lon2 = map(math.radians, (*a, *b))
    h = (math.sin((lat2 - lat1) / 2) ** 2
         + math.cos(lat1) * math.cos(lat2) * math.sin((lon2 - lon1) / 2) ** 2)
    return 2 * 3958.8 * math.asin(math.sqrt(h))


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> tuple[GenerationReport, list[dict[str, str]]]:
    report = generate(tmp_path_factory.mktemp("sample"), SAMPLE_ROWS, seed=7)
    return report, as_records(read_rows(report.flights_path))


@pytest.fixture(scope="module")
def records(sample) -> list[dict[str, str]]:
    return sample[1]


@pytest.fixture(scope="module")
def coordinates(sample) -> dict[str, tuple[float, float]]:
    with sample[0].airports_path.open(newline="", encoding="utf-8-sig") as handle:
        rows = csv.DictReader(handle, delimiter=";")
        return {r["Airport Code"]: (float(r["Latitude"]), float(r["Longitude"])) for r in rows}


@pytest.fixture(scope="module")
def invalid_sample(tmp_path_factory) -> tuple[GenerationReport, list[list[str]]]:
    report = generate(tmp_path_factory.mktemp("invalid"), 16_000, seed=3, invalid_rate=0.05)
    return report, read_rows(report.flights_path)


# --- layout ------------------------------------------------------------------------------


def test_flights_file_has_the_kaggle_header_and_27_fields_per_row(sample):
    report, records = sample
    rows = read_rows(report.flights_path)
    assert rows[0] == FLIGHT_HEADER
    assert report.flights_path.read_bytes().startswith(b"legId,searchDate,")
    assert len(rows) == SAMPLE_ROWS + 1
    assert {len(row) for row in rows} == {27}


def test_flights_file_parses_with_pyarrow(sample):
    report, _ = sample
    table = pa_csv.read_csv(
        report.flights_path,
        convert_options=pa_csv.ConvertOptions(column_types=dict.fromkeys(FLIGHT_HEADER, "string")),
    )
    assert table.column_names == FLIGHT_HEADER
    assert table.num_rows == SAMPLE_ROWS


def test_value_formats_match_the_real_file(records):
    for r in records[:2000]:
        assert re.fullmatch(r"[0-9a-f]{32}", r["legId"])
        assert re.fullmatch(r"\d{4}-\d\d-\d\d", r["searchDate"])
        assert re.fullmatch(r"\d+\.\d\d", r["totalFare"])
        assert re.fullmatch(r"\d+\.\d\d", r["baseFare"])
        assert r["isRefundable"] == "False" and r["isBasicEconomy"] in ("True", "False")
        assert r["seatsRemaining"].isdigit() and r["elapsedDays"].isdigit()
        for raw in r["segmentsDepartureTimeRaw"].split("||"):
            assert LOCAL_TIME.fullmatch(raw), raw
        for epoch in r["segmentsDepartureTimeEpochSeconds"].split("||"):
            assert re.fullmatch(r"\d{10}", epoch)


def test_airports_file_layout(sample):
    report, _ = sample
    data = report.airports_path.read_bytes()
    assert data.startswith("\ufeff".encode())
    assert data.count(b"\r\n") == report.airports + 1
    assert b"\\N" in data
    with report.airports_path.open(newline="", encoding="utf-8-sig") as handle:
        rows = list(csv.reader(handle, delimiter=";"))
    assert rows[0] == AIRPORT_HEADER
    assert {len(row) for row in rows} == {11}
    assert len(rows) - 1 == report.airports > 5000
    table = pa_csv.read_csv(report.airports_path,
                            parse_options=pa_csv.ParseOptions(delimiter=";"))
    assert table.column_names == AIRPORT_HEADER


def test_airports_file_covers_every_airport_the_flights_use(records, coordinates):
    used = set()
    for r in records:
        used |= set(r["segmentsDepartureAirportCode"].split("||"))
        used |= set(r["segmentsArrivalAirportCode"].split("||"))
        used |= {r["startingAirport"], r["destinationAirport"]}
    assert used - coordinates.keys() == set()
    assert math.isclose(coordinates["ATL"][0], 33.64, abs_tol=0.01)
    assert math.isclose(coordinates["LAX"][1], -118.41, abs_tol=0.01)


def test_airline_names_with_commas_are_quoted_and_nothing_else_is(sample):
    report, records = sample
    text = report.flights_path.read_text()
    with_comma = [r for r in records if "," in r["segmentsAirlineName"]]
    assert len(with_comma) > 50
    assert f'"{with_comma[0]["segmentsAirlineName"]}"' in text
    quoted_fields = re.findall(r'"[^"]*"', text)
    assert len(quoted_fields) == len(with_comma)
    assert all("," in field for field in quoted_fields)


# --- determinism -------------------------------------------------------------------------


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path, monkeypatch):
    # Small chunks so that several chunks run concurrently in the thread pool.
    monkeypatch.setattr(generate_module, "CHUNK_ROWS", 700)
    first = generate(tmp_path / "a", 5000, seed=11, invalid_rate=0.01)
    second = generate(tmp_path / "b", 5000, seed=11, invalid_rate=0.01)
    other = generate(tmp_path / "c", 5000, seed=12, invalid_rate=0.01)
    assert first.flights_path.read_bytes() == second.flights_path.read_bytes()
    assert first.airports_path.read_bytes() == second.airports_path.read_bytes()
    assert first.invalid_rows == second.invalid_rows
    assert first.flights_path.read_bytes() != other.flights_path.read_bytes()
    assert first.airports_path.read_bytes() != other.airports_path.read_bytes()


def test_zero_rows_writes_only_the_header(tmp_path):
    report = generate(tmp_path, 0, seed=1)
    assert report.flights_path.read_text() == ",".join(FLIGHT_HEADER) + "\n"
    assert report.rows == 0 and report.airports > 5000


class _InjectedFailure(Exception):
    pass


def test_a_failed_run_leaves_no_file_behind(tmp_path, monkeypatch):
    def fail(*_args, **_kwargs):
        raise _InjectedFailure

    monkeypatch.setattr(csv_text, "format_columns", fail)
    with pytest.raises(_InjectedFailure):
        generate(tmp_path, 1000, seed=1)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kwargs", [{"rows": -1}, {"invalid_rate": 1.5},
                                    {"duplicate_legid_rate": -0.1}])
def test_arguments_outside_their_domain_are_refused(tmp_path, kwargs):
    arguments = {"rows": 10, "seed": 1} | kwargs
    with pytest.raises(GeneratorArgumentError):
        generate(tmp_path, **arguments)


def test_command_line_prints_rows_and_rate(tmp_path, capsys):
    assert generate_data.main(["--rows", "1200", "--seed", "4", "--out", str(tmp_path),
                               "--invalid-rate", "0.1"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("wrote 1200 rows (") and line.endswith("rows/s")
    assert "\n" not in line
    assert len(read_rows(tmp_path / "itineraries.csv")) == 1201


# --- realism rates -------------------------------------------------------------------------


def test_segment_count_mix(records):
    counts = Counter(len(r["segmentsArrivalAirportCode"].split("||")) for r in records)
    share = {k: counts[k] / len(records) for k in counts}
    assert share[1] == pytest.approx(0.28, abs=0.01)
    assert share[2] == pytest.approx(0.64, abs=0.01)
    assert share[3] == pytest.approx(0.075, abs=0.005)
    four_plus = sum(v for k, v in counts.items() if k >= 4) / len(records)
    assert 0.001 <= four_plus <= 0.006


def test_empty_distances_come_with_none_segment_distances(records):
    empty = [r for r in records if r["totalTravelDistance"] == ""]
    assert len(empty) / len(records) == pytest.approx(0.06, abs=0.01)
    for r in empty:
        assert set(r["segmentsDistance"].split("||")) == {"None"}
    for r in records:
        if r["totalTravelDistance"]:
            legs = [int(x) for x in r["segmentsDistance"].split("||")]
            assert int(r["totalTravelDistance"]) == sum(legs)


def test_about_two_percent_use_an_alternate_airport_of_the_same_city(records):
    alternate = 0
    for r in records:
        first = r["segmentsDepartureAirportCode"].split("||")[0]
        last = r["segmentsArrivalAirportCode"].split("||")[-1]
        assert r["startingAirport"] in MAIN_AIRPORTS and r["destinationAirport"] in MAIN_AIRPORTS
        assert first == r["startingAirport"] or (r["startingAirport"], first) in ALTERNATES
        assert last == r["destinationAirport"] or (r["destinationAirport"], last) in ALTERNATES
        alternate += (first, last) != (r["startingAirport"], r["destinationAirport"])
    assert alternate / len(records) == pytest.approx(0.02, abs=0.004)


def test_travel_duration_formats_follow_the_real_mix(records):
    shapes = Counter(re.sub(r"\d+", "n", r["travelDuration"]) for r in records)
    assert shapes["PTnHnM"] / len(records) > 0.9
    for shape in ("PTnH", "PTnM", "PnDTnM", "PnDTnHnM"):
        assert shapes[shape] > 0, shape


def test_repeated_leg_ids_are_the_same_flight_searched_another_day(records):
    by_leg: dict[str, list[dict[str, str]]] = {}
    for r in records:
        by_leg.setdefault(r["legId"], []).append(r)
    repeats = [group for group in by_leg.values() if len(group) > 1]
    repeated_rows = sum(len(g) - 1 for g in repeats)
    assert 0.001 <= repeated_rows / len(records) <= 0.003
    fares_differ = 0
    for group in repeats:
        assert len({r["searchDate"] for r in group}) == len(group)
        assert len({tuple(r[c] for c in SEGMENT_COLUMNS) for r in group}) == 1
        fares_differ += len({r["totalFare"] for r in group}) > 1
    assert fares_differ >= 0.9 * len(repeats)


def test_duplicate_rate_flag_raises_repeats(tmp_path):
    report = generate(tmp_path, 5000, seed=2, duplicate_legid_rate=0.05)
    legs = Counter(r["legId"] for r in as_records(read_rows(report.flights_path)))
    repeated = sum(v - 1 for v in legs.values())
    assert repeated == report.duplicate_legid_rows
    assert repeated / 5000 == pytest.approx(0.05, abs=0.012)


def test_fares_grow_with_route_distance(records, coordinates):
    fares: dict[tuple[str, str], list[float]] = {}
    for r in records:
        fares.setdefault((r["startingAirport"], r["destinationAirport"]), []).append(
            float(r["totalFare"]))
    medians = {route: sorted(v)[len(v) // 2] for route, v in fares.items() if len(v) >= 50}
    miles = {route: haversine_miles(coordinates[route[0]], coordinates[route[1]])
             for route in medians}
    short = [medians[r] for r in medians if miles[r] < 600]
    long = [medians[r] for r in medians if miles[r] > 2000]
    assert sum(long) / len(long) > 2 * sum(short) / len(short)
    assert all(float(r["baseFare"]) < float(r["totalFare"]) for r in records)


def test_q2_long_detours_exist(records, coordinates):
    detours = 0
    for r in records:
        chain = [r["startingAirport"], *r["segmentsArrivalAirportCode"].split("||")]
        direct = haversine_miles(coordinates[chain[0]], coordinates[r["destinationAirport"]])
        total = (float(r["totalTravelDistance"]) if r["totalTravelDistance"] else
                 sum(haversine_miles(coordinates[a], coordinates[b])
                     for a, b in zip(chain, chain[1:], strict=False)))
        detours += total > 4 * direct
    # The real sample has 100 of 1,999 rows (5 %).
    assert 0.02 <= detours / len(records) <= 0.10


# --- consistency ---------------------------------------------------------------------------


def _epochs(text: str) -> list[int]:
    return [int(x) for x in text.split("||")]


def test_segment_fields_agree_with_each_other(records):
    for r in records:
        parts = {c: r[c].split("||") for c in SEGMENT_COLUMNS}
        count = len(parts["segmentsArrivalAirportCode"])
        assert {len(p) for p in parts.values()} == {count}
        assert r["isNonStop"] == str(count == 1)
        departures = parts["segmentsDepartureAirportCode"]
        arrivals = parts["segmentsArrivalAirportCode"]
        assert departures[1:] == arrivals[:-1]
        assert all(a != b for a, b in zip(departures, arrivals, strict=True))
        dep, arr = _epochs(r["segmentsDepartureTimeEpochSeconds"]), _epochs(
            r["segmentsArrivalTimeEpochSeconds"])
        durations = [int(x) for x in parts["segmentsDurationInSeconds"]]
        assert [b - a for a, b in zip(dep, arr, strict=True)] == durations
        assert all(a < b for a, b in zip(arr, dep[1:], strict=False))
        assert duration_minutes(r["travelDuration"]) * 60 == arr[-1] - dep[0]


def test_local_times_match_epochs_dates_and_elapsed_days(records):
    for r in records[:5000]:
        dep_raw = r["segmentsDepartureTimeRaw"].split("||")
        arr_raw = r["segmentsArrivalTimeRaw"].split("||")
        dep = _epochs(r["segmentsDepartureTimeEpochSeconds"])
        arr = _epochs(r["segmentsArrivalTimeEpochSeconds"])
        for raw, epoch in zip(dep_raw + arr_raw, dep + arr, strict=True):
            assert datetime.fromisoformat(raw).timestamp() == epoch
        flight_day = date.fromisoformat(r["flightDate"])
        assert datetime.fromisoformat(dep_raw[0]).date() == flight_day
        assert (datetime.fromisoformat(arr_raw[-1]).date() - flight_day).days == int(
            r["elapsedDays"])
        assert 1 <= (flight_day - date.fromisoformat(r["searchDate"])).days <= 60


def test_utc_offsets_follow_daylight_saving(records):
    offsets = Counter()
    for r in records:
        codes = r["segmentsDepartureAirportCode"].split("||")
        for code, raw in zip(codes, r["segmentsDepartureTimeRaw"].split("||"), strict=True):
            if code == "ATL" and raw[:10] != "2022-11-06":  # DST ends that morning
                offsets[(raw[:10] > "2022-11-06", raw[-6:])] += 1
    assert set(offsets) == {(False, "-04:00"), (True, "-05:00")}


def test_airline_codes_equipment_and_cabins_are_consistent(records):
    names = {a.code: a.name for a in catalog.ALL_AIRLINES}
    fleets = {a.code: set(a.equipment) for a in catalog.ALL_AIRLINES}
    for r in records[:5000]:
        codes = r["segmentsAirlineCode"].split("||")
        assert r["segmentsAirlineName"].split("||") == [names[c] for c in codes]
        for code, plane in zip(codes, r["segmentsEquipmentDescription"].split("||"), strict=True):
            assert plane in fleets[code]
        assert len(set(r["segmentsCabinCode"].split("||"))) == 1


# --- invalid rows ----------------------------------------------------------------------------


def _invalid_kind(row: list[str]) -> str | None:
    """Which validity rule of docs/queries.md a raw row breaks (None: a valid row)."""
    if len(row) < len(FLIGHT_HEADER):
        return "short_row"
    r = dict(zip(FLIGHT_HEADER, row, strict=True))
    if not r["legId"]:
        return "empty_leg_id"
    if not all(re.fullmatch("[A-Z]{3}", r[c]) for c in ("startingAirport", "destinationAirport")):
        return "bad_airport_code"
    if not DURATION.fullmatch(r["travelDuration"]) or r["travelDuration"] in ("", "P", "PT"):
        return "bad_duration"
    if not r["segmentsArrivalAirportCode"]:
        return "empty_segment_arrivals"
    try:
        fare = float(r["totalFare"])
    except ValueError:
        return "bad_fare"
    if not re.fullmatch(r"-?\d+\.\d\d", r["totalFare"]):
        return "non_finite_fare" if not math.isfinite(fare) else "bad_fare"
    return "negative_fare" if fare < 0 else None


def test_every_invalid_kind_is_present_and_counted(invalid_sample):
    report, rows = invalid_sample
    assert rows[0] == FLIGHT_HEADER
    found = Counter(_invalid_kind(row) for row in rows[1:])
    valid = found.pop(None)
    assert set(report.invalid_rows) == set(invalid.KINDS)
    assert dict(found) == report.invalid_rows
    assert all(count > 0 for count in report.invalid_rows.values())
    assert report.invalid_total == sum(found.values())
    assert report.invalid_total / report.rows == pytest.approx(0.05, abs=0.01)
    assert valid + report.invalid_total == report.rows


def test_short_rows_stop_before_the_segment_arrivals(invalid_sample):
    _, rows = invalid_sample
    short = [row for row in rows[1:] if len(row) < len(FLIGHT_HEADER)]
    assert short and all(1 <= len(row) <= 19 for row in short)


def test_invalid_values_with_commas_are_quoted(invalid_sample):
    report, rows = invalid_sample
    assert any(len(row) == 27 and row[12] == "1,234.00" for row in rows)
    assert '"1,234.00"' in report.flights_path.read_text()


# --- helpers ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("minutes", "text"), [
    (149, "PT2H29M"), (58, "PT58M"), (420, "PT7H"), (1459, "P1DT19M"), (1565, "P1DT2H5M"),
    (1440, "P1D"), (2 * 1440 + 60, "P2DT1H"),
])
def test_iso_duration(minutes, text):
    assert iso_duration(minutes) == text
    assert duration_minutes(text) == minutes


def test_quote_needed_follows_rfc_4180():
    import pyarrow as pa

    values = pa.array(["plain", "Boutique Air, Inc.", 'say "hi"', "two\nlines", ""])
    quoted = quote_needed(values).to_pylist()
    assert quoted == ["plain", '"Boutique Air, Inc."', '"say ""hi"""', '"two\nlines"', ""]
    assert next(csv.reader(io.StringIO(",".join(quoted)))) == values.to_pylist()


def test_header_constant_is_the_kaggle_one():
    assert list(csv_text.HEADER) == FLIGHT_HEADER
