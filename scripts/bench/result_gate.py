"""The pipeline benchmark's correctness gate: every session's q1.csv ... q4.csv against
DuckDB's Q1-Q4, each query compared as a multiset of rows (result_compare.py: row order carries
no meaning, numbers equal within docs/queries.md's 1e-9 relative tolerance, other fields as exact
text).

Why: a faster pipeline is only worth measuring while it computes the same answer; equal row
counts (what the bench checked before) hide a changed fare, a wrong stopover list or one row
swapped for another. DuckDB is the reference because it computes docs/queries.md independently of
the pipeline's Spark code (tests/unit/scripts/bench/test_bench_duckdb.py holds it to the plain
Python reference). Without DuckDB (`--skip-duckdb`) the sessions are compared with the first
one only: that still catches a session that differs from another, not a bug they share.

Pure reads of the result files; raises ResultFileError for a file that cannot be read as its
query's CSV, ResultMismatchError (naming each query, session and a few rows) for any
difference.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from common.flights.result_csv import QUERY_HEADERS, ResultShapeError
from oracle.result_compare import ResultValueError, Unmatched, show_row, unmatched_rows
from scripts.bench.errors import BenchError

QUERIES = tuple(QUERY_HEADERS)
ROWS_SHOWN_MAX = 5  # per side and query in the error message

Rows = Sequence[Sequence[object]]


class ResultFileError(BenchError):
    """A session's result file is missing, has the wrong header or a malformed row."""

    where: str  # the file, or "<session> <query>" for a row found while comparing
    reason: str

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: {reason}")
        self.where = where
        self.reason = reason


@dataclass(frozen=True)
class QueryMismatch:
    """One query of one session that does not equal the reference."""

    session: str
    reference: str
    unmatched: Unmatched  # .actual: only in the session; .expected: only in the reference

    def describe(self) -> str:
        query, unmatched = self.unmatched.query, self.unmatched
        lines = [f"{query}: {self.session} differs from {self.reference} in "
                 f"{unmatched.rows_differing} rows ({len(unmatched.actual)} only in the "
                 f"session, {len(unmatched.expected)} only in {self.reference})"]
        for side, rows in ((self.session, unmatched.actual),
                           (self.reference, unmatched.expected)):
            lines += [f"    only in {side}: {show_row(query, row)}"
                      for row in rows[:ROWS_SHOWN_MAX]]
            if len(rows) > ROWS_SHOWN_MAX:
                lines.append(f"    ... and {len(rows) - ROWS_SHOWN_MAX} more")
        return "\n".join(lines)


class ResultMismatchError(BenchError):
    """The pipeline's results differ from the reference's (or one session's from another's)."""

    mismatches: tuple[QueryMismatch, ...]

    def __init__(self, mismatches: Sequence[QueryMismatch]) -> None:
        assert mismatches, "a mismatch error needs a mismatch"
        queries = sorted({m.unmatched.query for m in mismatches})
        super().__init__(f"results differ in {', '.join(queries)}:\n"
                         + "\n".join(m.describe() for m in mismatches))
        self.mismatches = tuple(mismatches)
        self.queries = tuple(queries)


@dataclass(frozen=True)
class GateReport:
    """What passed: `sessions` sessions equal `reference` ("duckdb", or the first session's
    name when DuckDB was skipped), with `rows` rows per query."""

    reference: str
    sessions: int
    rows: dict[str, int]

    def line(self) -> str:
        rows = ", ".join(f"{query} {count:,}" for query, count in self.rows.items())
        if self.reference == "duckdb":
            return (f"result gate: {self.sessions} session(s) equal DuckDB's Q1-Q4 as multisets "
                    f"of rows ({rows} rows)")
        return (f"result gate: DuckDB skipped (--skip-duckdb): sessions compared with one "
                f"another only, {self.sessions} session(s) equal {self.reference} ({rows} rows)")


def read_results(results_dir: Path) -> dict[str, list[list[str]]]:
    """q1.csv ... q4.csv of one session: the text fields of each row, headers checked."""
    results = {}
    for query in QUERIES:
        path = results_dir / f"{query}.csv"
        try:
            with open(path, newline="", encoding="utf-8") as file:
                header, *rows = csv.reader(file)
        except (OSError, ValueError) as error:  # missing, unreadable, or empty (no header)
            raise ResultFileError(str(path), f"{type(error).__name__}: {error}") from error
        if tuple(header) != QUERY_HEADERS[query]:
            raise ResultFileError(str(path), f"header {header}, expected {QUERY_HEADERS[query]}")
        for number, row in enumerate(rows, start=1):
            if len(row) != len(header):
                raise ResultFileError(f"{path} row {number}", f"{len(row)} fields, expected "
                                      f"{len(header)}: {row}")
        results[query] = rows
    return results


def compare_sessions(sessions: Mapping[str, Mapping[str, Rows]],
                     reference: Mapping[str, Rows] | None) -> GateReport:
    """Every session's results against `reference` (DuckDB's), or, when None, against the
    first session's; ResultMismatchError listing every query that differs."""
    assert sessions, "the gate needs at least one session"
    names = list(sessions)
    if reference is None:
        reference_name, reference = names[0], sessions[names[0]]
        compared = names[1:]
    else:
        reference_name, compared = "duckdb", names
    mismatches = []
    for name in compared:
        for query in QUERIES:
            try:
                unmatched = unmatched_rows(query, sessions[name][query], reference[query])
            except (ResultShapeError, ResultValueError) as error:
                raise ResultFileError(f"{name} {query}", str(error)) from error
            if unmatched:
                mismatches.append(QueryMismatch(name, reference_name, unmatched))
    if mismatches:
        raise ResultMismatchError(mismatches)
    return GateReport(reference_name, len(names),
                      {query: len(reference[query]) for query in QUERIES})


def gate(session_dirs: Mapping[str, Path], reference: Mapping[str, Rows] | None) -> GateReport:
    """Read every session's result files and compare them (compare_sessions)."""
    return compare_sessions({name: read_results(path) for name, path in session_dirs.items()},
                            reference)
