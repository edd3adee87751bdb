"""The session check's input (oracle/session_check.py, scripts/verify/session_data.py):
malformed lines streamed into the middle of the flights and counted, lines counted in chunks
as `splitlines` counts them, and the DuckDB reference equal to the plain-Python one it stands
in for at the full dataset's sizes."""

import pytest

from oracle.result_compare import result_differences
from oracle.session_check import (
    SHORT_LINE,
    UNDECODABLE_LINE,
    UnknownReferenceError,
    count_lines,
)
from scripts.datagen.generate import FLIGHTS_FILE
from scripts.verify.session_data import prepare_session_data


@pytest.mark.parametrize("text", [b"", b"a", b"a\n", b"a\nb", b"a\nb\n", b"\n\n", b"h\n" * 10])
@pytest.mark.parametrize("chunk_bytes", [1, 3, 1 << 20])
def test_lines_are_counted_as_splitlines_counts_them(tmp_path, text, chunk_bytes):
    path = tmp_path / "f"
    path.write_bytes(text)
    assert count_lines(path, chunk_bytes) == len(text.splitlines())


def test_the_malformed_lines_land_in_the_middle_and_nothing_else_changes(tmp_path):
    data = prepare_session_data(tmp_path / "clean", tmp_path / "dirty", rows=101, seed=3,
                                invalid_rate=0.05)
    clean = (tmp_path / "clean" / FLIGHTS_FILE).read_bytes().splitlines(keepends=True)
    dirty = (data.directory / FLIGHTS_FILE).read_bytes().splitlines(keepends=True)
    middle = len(clean) // 2
    assert dirty == clean[:middle] + [UNDECODABLE_LINE, SHORT_LINE] + clean[middle:]
    assert data.flight_lines == len(dirty) - 1


def test_the_duckdb_reference_equals_the_python_one(tmp_path):
    python = prepare_session_data(tmp_path / "c1", tmp_path / "d1", rows=3_000, seed=8,
                                  invalid_rate=0.05).reference
    duckdb = prepare_session_data(tmp_path / "c2", tmp_path / "d2", rows=3_000, seed=8,
                                  invalid_rate=0.05, reference="duckdb").reference
    for query, expected in python.by_query().items():
        assert expected, f"{query}: an empty reference would prove nothing"
        assert result_differences(query, duckdb.by_query()[query], expected) == []
    assert (duckdb.rows, duckdb.valid_rows) == (python.rows, python.valid_rows)


def test_an_unknown_reference_is_refused(tmp_path):
    with pytest.raises(UnknownReferenceError, match="reference must be one of"):
        prepare_session_data(tmp_path / "c", tmp_path / "d", rows=5, seed=1, invalid_rate=0.0,
                             reference="sqlite")
