"""The client's streaming CSV reader: header, BOM, quoting, rejected rows, slicing, row ids."""

from pathlib import Path

import pyarrow as pa
import pytest

from client.csv_reader import (
    AIRPORTS_DIALECT,
    FLIGHTS_DIALECT,
    UNDECODABLE_BYTES,
    WRONG_FIELD_COUNT,
    CsvParseError,
    CsvSliceReader,
    MalformedHeaderError,
    rows_per_slice,
)
from common.flights.arrow_rows import ROW_ID
from tests.real_samples import REAL_SAMPLES_DIR


def write(tmp_path: Path, data: bytes, name: str = "f.csv") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def all_rows(reader: CsvSliceReader) -> list[dict]:
    rows = []
    for batch in reader.slices():
        rows += batch.to_pylist()
    return rows


def test_airports_bom_semicolons_and_null_marker_kept_as_text(tmp_path):
    path = write(tmp_path, "\ufeffAirport Code;Latitude;Longitude\nATL;33.6;-84.4\nXYZ;\\N;\n"
                 .encode())
    reader = CsvSliceReader(path, AIRPORTS_DIALECT, batch_rows=10)
    assert reader.columns == ["Airport Code", "Latitude", "Longitude"]
    assert all_rows(reader) == [
        {"Airport Code": "ATL", "Latitude": "33.6", "Longitude": "-84.4", ROW_ID: 0},
        {"Airport Code": "XYZ", "Latitude": "\\N", "Longitude": "", ROW_ID: 1},
    ]


def test_rfc4180_quoting_commas_doubled_quotes_and_line_breaks(tmp_path):
    path = write(tmp_path, b'a,b,c\n"x,1","say ""hi""","two\nlines"\nplain,,""\n')
    rows = all_rows(CsvSliceReader(path, FLIGHTS_DIALECT, batch_rows=10))
    assert rows == [
        {"a": "x,1", "b": 'say "hi"', "c": "two\nlines", ROW_ID: 0},
        {"a": "plain", "b": "", "c": "", ROW_ID: 1},
    ]
    schema = next(CsvSliceReader(path, FLIGHTS_DIALECT, batch_rows=10).slices()).schema
    assert schema.types == [pa.string(), pa.string(), pa.string(), pa.int64()]


def test_rows_with_wrong_field_counts_are_counted_sampled_and_not_sent(tmp_path):
    path = write(tmp_path, b"a,b,c\n1,2,3\n4,5\n6,7,8,9\n10,11,12\n")
    reader = CsvSliceReader(path, FLIGHTS_DIALECT, batch_rows=10, samples_max=1)
    assert [row["a"] for row in all_rows(reader)] == ["1", "10"]
    assert reader.rejected.counts == {WRONG_FIELD_COUNT: 2, UNDECODABLE_BYTES: 0}
    assert [(s.kind, s.line, s.text) for s in reader.rejected.samples] == [
        (WRONG_FIELD_COUNT, 3, "4,5")]


def test_undecodable_rows_are_rejected_alone_and_row_ids_stay_dense(tmp_path):
    path = write(tmp_path, b"a,b\nok,1\n\xff\xfe,2\nfine,\xc3\n\xc3\xa9t\xc3\xa9,4\n")
    reader = CsvSliceReader(path, FLIGHTS_DIALECT, batch_rows=10)
    assert all_rows(reader) == [{"a": "ok", "b": "1", ROW_ID: 0},
                                {"a": "été", "b": "4", ROW_ID: 1}]
    assert reader.rejected.counts == {WRONG_FIELD_COUNT: 0, UNDECODABLE_BYTES: 2}
    assert reader.rejected.total == 2


def test_unterminated_quote_swallows_the_rest_as_one_rejected_row(tmp_path):
    path = write(tmp_path, b'a,b,c\n1,2,3\n"4,5,6\n7,8,9\n')
    reader = CsvSliceReader(path, FLIGHTS_DIALECT, batch_rows=10)
    assert [row["a"] for row in all_rows(reader)] == ["1"]
    assert reader.rejected.counts[WRONG_FIELD_COUNT] == 1


def test_an_open_quote_across_blocks_is_a_named_parse_error(tmp_path):
    lines = [b"a,b,c"] + [f"{i},b{i},c{i}".encode() for i in range(3000)]
    lines[100] = b'"99,open quote,c'
    path = write(tmp_path, b"\n".join(lines) + b"\n")
    reader = CsvSliceReader(path, FLIGHTS_DIALECT, batch_rows=300, block_bytes=4096)
    with pytest.raises(CsvParseError, match="cannot parse past byte"):
        list(reader.slices())


@pytest.mark.parametrize("data", [b"\xff,b\n1,2\n", b"a,,c\n1,2,3\n", b"a,b,a\n1,2,3\n", b"",
                                  b"\n1,2\n", b"row_id,x\n1,2\n", b"a\rb,c\n1,2\n"])
def test_bad_headers_are_refused(tmp_path, data):
    path = write(tmp_path, data)
    with pytest.raises(MalformedHeaderError) as caught:
        CsvSliceReader(path, FLIGHTS_DIALECT, batch_rows=10)
    assert str(caught.value) == f"{path}: {caught.value.problem}"


def test_a_first_block_pyarrow_cannot_parse_is_a_named_parse_error(tmp_path):
    path = write(tmp_path, b"a,b")  # a header without a line end: pyarrow sees no row
    reader = CsvSliceReader(path, FLIGHTS_DIALECT, batch_rows=10)
    with pytest.raises(CsvParseError, match="cannot parse the first block"):
        list(reader.slices())


def test_first_block_rows_reads_one_block_and_counts_its_rejects(tmp_path):
    lines = [b"a,b,c", b"1,2"] + [f"{i},b{i},c{i}".encode() for i in range(3000)]
    path = write(tmp_path, b"\n".join(lines) + b"\n")
    reader = CsvSliceReader(path, FLIGHTS_DIALECT, batch_rows=10, block_bytes=4096)
    accepted = reader.first_block_rows()
    assert 0 < accepted < 3000
    assert reader.rejected.counts[WRONG_FIELD_COUNT] == 1


def test_slices_hold_batch_rows_across_block_boundaries(tmp_path):
    lines = [b"n,text"] + [f"{i},{'x' * (i % 50)}".encode() for i in range(1000)]
    path = write(tmp_path, b"\n".join(lines) + b"\n")
    reader = CsvSliceReader(path, FLIGHTS_DIALECT, batch_rows=300, block_bytes=1024)
    slices = list(reader.slices())
    assert [s.num_rows for s in slices] == [300, 300, 300, 100]
    numbers = [int(v) for s in slices for v in s.column("n").to_pylist()]
    row_ids = [v for s in slices for v in s.column(ROW_ID).to_pylist()]
    assert numbers == list(range(1000)) and row_ids == list(range(1000))
    assert reader.rows_accepted == 1000 and reader.bytes_parsed == reader.file_bytes


def test_same_file_same_slices_on_every_pass(tmp_path):
    lines = [b"a,b"] + [f"{i},{i * 7}".encode() for i in range(257)] + [b"short"]
    path = write(tmp_path, b"\n".join(lines) + b"\n")
    reader = CsvSliceReader(path, FLIGHTS_DIALECT, batch_rows=50, block_bytes=1024)
    first = [s.to_pydict() for s in reader.slices()]
    second = [s.to_pydict() for s in reader.slices()]
    assert first == second and len(first) == 6
    assert reader.rejected.counts[WRONG_FIELD_COUNT] == 1  # counts restart with each pass


def test_header_only_file_has_no_slices(tmp_path):
    reader = CsvSliceReader(write(tmp_path, b"a,b\n"), FLIGHTS_DIALECT, batch_rows=5)
    assert list(reader.slices()) == [] and reader.rejected.total == 0


def test_real_samples_read_whole():
    flights = CsvSliceReader(REAL_SAMPLES_DIR / "itineraries_1000_a.csv", FLIGHTS_DIALECT,
                             batch_rows=300)
    rows = all_rows(flights)
    assert len(rows) == 1000 and flights.rejected.total == 0
    assert len(flights.columns) == 27 and rows[0]["legId"] == "98685953630e772a098941b71906592b"
    airports = CsvSliceReader(REAL_SAMPLES_DIR / "airports-codepublic.csv", AIRPORTS_DIALECT,
                              batch_rows=300)
    codes = [row["Airport Code"] for row in all_rows(airports)]
    assert airports.columns[0] == "Airport Code" and codes[0] == "YCB"


def test_rows_per_slice_follows_the_mean_line_length_after_the_header(tmp_path):
    header = b"a,b," + b"h" * 500  # a long header does not count
    lines = [header] + [b"1,%s" % (b"x" * 99) for _ in range(5000)]  # 101 bytes + newline
    path = write(tmp_path, b"\n".join(lines) + b"\n")
    assert rows_per_slice(path, slice_bytes=102 * 300) == 300
    assert rows_per_slice(path, slice_bytes=102 * 300, sample_bytes=1000) == 300
    assert rows_per_slice(path, slice_bytes=10) == 1  # never below one row


def test_rows_per_slice_of_a_header_only_or_unterminated_file(tmp_path):
    assert rows_per_slice(write(tmp_path, b"a,b\n"), slice_bytes=1 << 20) == 1
    path = write(tmp_path, b"a,b\n" + b"1," + b"x" * 98, name="g.csv")  # one line, no newline
    assert rows_per_slice(path, slice_bytes=1000) == 10
