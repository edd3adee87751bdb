"""The input check before a session: each refusal names the file and the problem in one line;
files in the Kaggle and Opendatahub layouts, quirks included, pass; malformed rows inside a
well-formed file are left to the reader (counted, not refused)."""

import os
from pathlib import Path

import pytest

from client.__main__ import EXIT_USAGE, main
from client.csv_reader import AIRPORTS_DIALECT, FLIGHTS_DIALECT, CsvSliceReader
from client.input_check import (
    AIRPORTS_LAYOUT,
    FLIGHTS_LAYOUT,
    InputFileError,
    check_input_file,
    check_input_files,
)
from tests.real_samples import REAL_SAMPLES_DIR
from tests.unit.client.input_samples import (
    AIRPORTS_TEXT,
    FLIGHTS_HEADER,
    FLIGHTS_ROWS,
    FLIGHTS_TEXT,
)

REAL = REAL_SAMPLES_DIR


def write(tmp_path: Path, data: bytes | str, name: str = "f.csv") -> Path:
    path = tmp_path / name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def refusal(path: Path, layout=FLIGHTS_LAYOUT) -> str:
    with pytest.raises(InputFileError) as caught:
        check_input_file(path, layout)
    message = str(caught.value)
    assert message.startswith(f"{layout.role} file {path}: ")
    assert len(message.splitlines()) == 1
    return message.removeprefix(f"{layout.role} file {path}: ")


def without_column(text: str, name: str, delimiter: str) -> str:
    lines = [line.split(delimiter) for line in text.splitlines()]
    index = lines[0].index(name)
    return "".join(delimiter.join(fields[:index] + fields[index + 1:]) + "\n"
                   for fields in lines)


def test_the_kaggle_and_opendatahub_layouts_with_their_quirks_pass(tmp_path):
    flights = write(tmp_path, FLIGHTS_TEXT, "itineraries.csv")
    airports = write(tmp_path, AIRPORTS_TEXT, "airports.csv")
    check_input_files(flights, airports)
    flight_rows = list(CsvSliceReader(flights, FLIGHTS_DIALECT, 10).slices())[0].to_pylist()
    assert flight_rows[1]["segmentsEquipmentDescription"] == "Boeing 717, winglets||Airbus A321"
    airport_rows = list(CsvSliceReader(airports, AIRPORTS_DIALECT, 10).slices())[0].to_pylist()
    assert airport_rows[0]["Airport Code"] == "YCB" and airport_rows[1]["World Area Code"] == "\\N"


@pytest.mark.parametrize("name, layout", [("itineraries_1000_a.csv", FLIGHTS_LAYOUT),
                                          ("itineraries_999_b.csv", FLIGHTS_LAYOUT),
                                          ("airports-codepublic.csv", AIRPORTS_LAYOUT)])
def test_the_real_sample_files_pass(name, layout):
    path = REAL / name
    check_input_file(path, layout)
    assert path.stat().st_size > 0


def test_a_missing_file_is_refused(tmp_path):
    assert refusal(tmp_path / "absent.csv") == "no such file"


def test_a_directory_is_refused(tmp_path):
    assert refusal(tmp_path) == "is a directory, not a file"


def test_a_path_through_a_file_is_refused(tmp_path):
    # What root cannot read either (a chmod 000 file is readable to root).
    not_a_directory = write(tmp_path, FLIGHTS_TEXT)
    assert (refusal(not_a_directory / "flights.csv")
            == "no such file (a parent of it is not a directory)")


def test_a_pipe_is_refused_without_waiting_for_a_writer(tmp_path):
    pipe = tmp_path / "pipe.csv"
    os.mkfifo(pipe)
    assert refusal(pipe) == "not a regular file"


def test_an_empty_file_is_refused(tmp_path):
    assert refusal(write(tmp_path, b"")) == "empty file (no header row)"


def test_a_header_without_the_queries_columns_is_refused(tmp_path):
    assert refusal(write(tmp_path, "foo,bar\n1,2\n")) == (
        "missing columns legId, startingAirport, destinationAirport, travelDuration, totalFare, "
        "totalTravelDistance, segmentsArrivalAirportCode (its header split on ',': foo, bar)")


def test_binary_junk_is_refused(tmp_path):
    junk = bytes(range(128, 256)) * 64
    assert refusal(write(tmp_path, junk)).startswith("header is not UTF-8: ")


def test_binary_junk_after_a_good_header_is_refused_in_one_line(tmp_path, capfd):
    junk = b"\n".join(bytes(range(128 + n % 100, 256)) for n in range(200))
    problem = refusal(write(tmp_path, FLIGHTS_HEADER.encode() + b"\n" + junk))
    assert problem.startswith("cannot parse the first block: ")
    assert problem.endswith("(a row with the wrong number of fields holds bytes that are not "
                            "UTF-8)")
    assert capfd.readouterr().err == ""  # pyarrow's traceback kept out of stderr


def test_a_first_block_swallowed_by_an_open_quote_is_refused(tmp_path):
    text = FLIGHTS_HEADER + '\n"open quote,never closed\n' + FLIGHTS_ROWS
    assert refusal(write(tmp_path, text)) == (
        "none of the rows in its first 1,048,576 bytes can be read (wrong_field_count 1)")


def test_flights_missing_one_column_are_refused(tmp_path):
    path = write(tmp_path, without_column(FLIGHTS_TEXT, "totalFare", ","))
    assert refusal(path).startswith("missing column totalFare (its header split on ',': legId, ")


def test_airports_missing_latitude_are_refused(tmp_path):
    path = write(tmp_path, without_column(AIRPORTS_TEXT, "Latitude", ";"))
    assert refusal(path, AIRPORTS_LAYOUT).startswith(
        "missing column Latitude (its header split on ';': Airport Code, Airport Name, ")


def test_airports_separated_by_commas_are_refused(tmp_path):
    path = write(tmp_path, AIRPORTS_TEXT.replace(";", ","))
    assert refusal(path, AIRPORTS_LAYOUT).startswith(
        "missing columns Airport Code, Latitude, Longitude (its header split on ';': "
        "Airport Code,Airport Name,")


def test_a_header_with_a_carriage_return_inside_is_refused(tmp_path):
    path = write(tmp_path, FLIGHTS_HEADER.replace(",", "\r", 1) + "\n" + FLIGHTS_ROWS)
    assert refusal(path).startswith("header is not one CSV row: ")


def test_control_characters_of_a_header_are_escaped_in_the_one_line(tmp_path):
    problem = refusal(write(tmp_path, "foo\x0bbar,\x1cbaz\n1,2\n"))
    assert problem.endswith("(its header split on ',': foo\\x0bbar, \\x1cbaz)")


def test_malformed_rows_inside_a_well_formed_file_are_left_to_the_upload(tmp_path):
    text = (FLIGHTS_TEXT.encode() + b"only,three,fields\n"
            + b"\xff\xfebad" + b",x" * 26 + b"\n")
    path = write(tmp_path, text)
    check_input_file(path, FLIGHTS_LAYOUT)
    reader = CsvSliceReader(path, FLIGHTS_DIALECT, 10)
    assert sum(batch.num_rows for batch in reader.slices()) == 2
    assert reader.rejected.counts == {"wrong_field_count": 1, "undecodable_bytes": 1}


def test_the_client_refuses_before_printing_a_session_id(tmp_path, capsys):
    airports = write(tmp_path, AIRPORTS_TEXT, "airports.csv")
    status = main(["--flights", str(tmp_path / "absent.csv"), "--airports", str(airports),
                   "--brokers", "127.0.0.1:9", "--results-dir", str(tmp_path / "results")])
    out, err = capsys.readouterr()
    assert (status, out) == (EXIT_USAGE, "")
    assert err == f"client: flights file {tmp_path / 'absent.csv'}: no such file\n"
    assert not (tmp_path / "results").exists()


def test_the_airports_file_is_checked_too(tmp_path, capsys):
    flights = write(tmp_path, FLIGHTS_TEXT, "flights.csv")
    airports = write(tmp_path, without_column(AIRPORTS_TEXT, "Longitude", ";"), "airports.csv")
    status = main(["--flights", str(flights), "--airports", str(airports),
                   "--brokers", "127.0.0.1:9", "--results-dir", str(tmp_path / "results")])
    out, err = capsys.readouterr()
    assert (status, out) == (EXIT_USAGE, "")
    assert err.startswith(f"client: airports file {airports}: missing column Longitude (")
    assert err.count("\n") == 1
