"""The pipeline benchmark's correctness gate (scripts/bench/result_gate.py): q1.csv ... q4.csv
of every session against DuckDB's rows as multisets; any difference is a ResultMismatchError
naming the query, the count of differing rows and a few of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.flights.result_csv import csv_text, format_row
from scripts.bench.errors import BenchError
from scripts.bench.result_gate import (
    ResultFileError,
    ResultMismatchError,
    compare_sessions,
    gate,
)

# As DuckDB returns them: Python values in docs/queries.md's column order. legId "a" is there twice
# with different fares (legId is not unique).
REFERENCE = {
    "q1": [("a", "ATL-BOS", 100.0, "X||Y||Z"), ("a", "ATL-BOS", 200.5, "X||Y||Z"),
           ("b", "BOS-ATL", 1.5, "P||Q||R")],
    "q2": [("a", "ATL-BOS", 4321.123456789), ("c", "LAX-SEA", 999.0)],
    "q3": [("a", "ATL-BOS", "X||Y||Z", "PT9H5M"), ("b", "BOS-ATL", "P||Q||R", "P1DT2H")],
    "q4": [("ATL-BOS", 150.25, 200.5), ("BOS-ATL", 1.5, 1.5)],
}


def _write(directory: Path, results: dict[str, list[tuple]]) -> Path:
    """A session's files as the client writes them (common/flights/result_csv.py: floats as
    repr)."""
    directory.mkdir(parents=True, exist_ok=True)
    for query, rows in results.items():
        text = csv_text(query, (format_row(query, row) for row in rows))
        (directory / f"{query}.csv").write_text(text, encoding="utf-8")
    return directory


def _changed(query: str, rows: list[tuple]) -> dict[str, list[tuple]]:
    return {**REFERENCE, query: rows}


def test_equal_results_pass_and_the_report_says_against_what(tmp_path):
    report = gate({"session 0 (fresh)": _write(tmp_path / "s0", REFERENCE),
                   "session 1 (warm)": _write(tmp_path / "s1", REFERENCE)}, REFERENCE)
    assert (report.reference, report.sessions) == ("duckdb", 2)
    assert report.rows == {"q1": 3, "q2": 2, "q3": 2, "q4": 2}
    assert "equal DuckDB" in report.line()


def test_reordered_rows_pass(tmp_path):
    reordered = {query: list(reversed(rows)) for query, rows in REFERENCE.items()}
    gate({"s": _write(tmp_path, reordered)}, REFERENCE)


def test_float_formats_the_contract_allows_pass():
    # docs/queries.md: enough digits to round-trip, compared within 1e-9 relative.
    texts = {
        "q1": [["a", "ATL-BOS", "1e2", "X||Y||Z"], ["a", "ATL-BOS", "200.50", "X||Y||Z"],
               ["b", "BOS-ATL", "1.5000000001", "P||Q||R"]],
        "q2": [["c", "LAX-SEA", "999"], ["a", "ATL-BOS", "4.321123456789E3"]],
        "q3": [[str(v) for v in row] for row in REFERENCE["q3"]],
        "q4": [["BOS-ATL", "15e-1", "1.5"], ["ATL-BOS", "150.25", "2.005e+02"]],
    }
    compare_sessions({"s": texts}, REFERENCE)


def test_a_changed_value_fails_naming_query_and_rows(tmp_path):
    rows = [*REFERENCE["q4"][:1], ("BOS-ATL", 1.5, 1.6)]
    with pytest.raises(ResultMismatchError) as caught:
        gate({"session 0 (fresh)": _write(tmp_path, _changed("q4", rows))}, REFERENCE)
    error = caught.value
    assert isinstance(error, BenchError)
    assert error.queries == ("q4",)
    (mismatch,) = error.mismatches
    assert mismatch.unmatched.rows_differing == 2  # the changed row, and the one it replaced
    assert "q4: session 0 (fresh) differs from duckdb in 2 rows" in str(error)
    assert "maxFare=1.6" in str(error) and "maxFare=1.5" in str(error)


def test_a_change_beyond_the_tolerance_fails():
    rows = [("a", "ATL-BOS", 4321.123456789 * (1 + 1e-8)), REFERENCE["q2"][1]]
    with pytest.raises(ResultMismatchError, match="q2"):
        compare_sessions({"s": _changed("q2", rows)}, REFERENCE)


def test_a_changed_text_field_fails():
    rows = [("a", "ATL-BOS", "X||Y||Z", "PT9H6M"), REFERENCE["q3"][1]]
    with pytest.raises(ResultMismatchError, match="travelDuration=PT9H6M"):
        compare_sessions({"s": _changed("q3", rows)}, REFERENCE)


def test_a_missing_row_fails(tmp_path):
    with pytest.raises(ResultMismatchError) as caught:
        gate({"s": _write(tmp_path, _changed("q1", REFERENCE["q1"][1:]))}, REFERENCE)
    (mismatch,) = caught.value.mismatches
    assert (len(mismatch.unmatched.actual), len(mismatch.unmatched.expected)) == (0, 1)
    assert "1 rows (0 only in the session, 1 only in duckdb)" in str(caught.value)


def test_a_duplicated_row_fails(tmp_path):
    # Same rows as a set, one more as a multiset: a count check would see it, a set would not.
    with pytest.raises(ResultMismatchError, match=r"q1: s differs from duckdb in 1 rows"):
        gate({"s": _write(tmp_path, _changed("q1", [*REFERENCE["q1"], REFERENCE["q1"][0]]))},
             REFERENCE)


def test_a_swapped_row_with_equal_counts_fails():
    rows = [*REFERENCE["q2"][:1], ("d", "LAX-SEA", 999.0)]
    with pytest.raises(ResultMismatchError, match="legId=d"):
        compare_sessions({"s": _changed("q2", rows)}, REFERENCE)


def test_every_differing_query_is_listed_and_few_rows_shown():
    many = [("z", "ATL-BOS", float(n), "X||Y||Z") for n in range(20)]
    results = {**_changed("q1", many), "q4": []}
    with pytest.raises(ResultMismatchError) as caught:
        compare_sessions({"s": results}, REFERENCE)
    assert caught.value.queries == ("q1", "q4")
    assert "and 15 more" in str(caught.value)  # 20 extra rows, 5 shown


def test_without_duckdb_sessions_are_compared_with_the_first():
    report = compare_sessions({"session 0": REFERENCE, "session 1": REFERENCE}, None)
    assert report.reference == "session 0"
    assert "DuckDB skipped (--skip-duckdb)" in report.line()
    with pytest.raises(ResultMismatchError, match="session 1 differs from session 0"):
        compare_sessions({"session 0": REFERENCE,
                          "session 1": _changed("q3", REFERENCE["q3"][:1])}, None)


def test_a_missing_file_a_wrong_header_or_a_short_row_is_a_file_error(tmp_path):
    directory = _write(tmp_path, REFERENCE)
    (directory / "q2.csv").unlink()
    with pytest.raises(ResultFileError, match="q2.csv"):
        gate({"s": directory}, REFERENCE)
    _write(directory, REFERENCE)
    (directory / "q3.csv").write_text("legId,route\na,ATL-BOS\n")
    with pytest.raises(ResultFileError, match="header"):
        gate({"s": directory}, REFERENCE)
    _write(directory, REFERENCE)
    (directory / "q4.csv").write_text("route,avgFare,maxFare\nATL-BOS,1.0\n")
    with pytest.raises(ResultFileError, match="row 1"):
        gate({"s": directory}, REFERENCE)


def test_a_number_that_is_not_one_is_a_file_error():
    rows = [["a", "ATL-BOS", "n/a"], ["c", "LAX-SEA", "999.0"]]
    with pytest.raises(ResultFileError, match="totalDistance"):
        compare_sessions({"s": {**REFERENCE, "q2": rows}}, REFERENCE)
