"""One client session judged against the reference: its input with lines the client's reader
must reject, and every result file checked against oracle/reference.py (docs/queries.md read
independently of the Spark code) or oracle/duckdb_queries.py.

Used by `python -m scripts.chaos_verify` (scripts/verify/session_data.py generates the data and
calls `reference_of` and `write_with_malformed_lines`) and by the e2e tests.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

from oracle.reference import ReferenceResults, compute_files
from oracle.result_compare import QUERY_COLUMNS, result_differences

# Lines the client's reader must reject before anything reaches the broker (the generator's
# invalid rows are well-formed CSV that the queries reject; these are not even that).
UNDECODABLE_LINE = b"\xff\xfe\xfdbad" + b",x" * 26 + b"\n"
SHORT_LINE = b"only,three,fields\n"
PROBLEMS_SHOWN_MAX = 20


@dataclass(frozen=True)
class SessionData:
    directory: Path  # holds the flights file (with the malformed lines) and the airports file
    reference: ReferenceResults  # of the flights without the malformed lines
    flight_lines: int  # data lines of the flights file, the malformed ones included

    def of(self, client: str) -> SessionData:
        """Shared input: every client of a round runs this same data (scripts/verify/
        clients_data.py gives each client its own)."""
        return self


# The reference computations of docs/queries.md: the plain-Python one (oracle/reference.py, holds
# every valid row in memory: fine up to a few million rows) and DuckDB's
# (oracle/duckdb_queries.py, held to the Python one by tests/unit/oracle/test_duckdb_queries.py),
# for the full dataset's sizes.
REFERENCES = ("python", "duckdb")


class UnknownReferenceError(ValueError):
    """A reference computation other than those of REFERENCES was asked for."""


def reference_of(flights: Path, airports: Path, reference: str = "python") -> ReferenceResults:
    """The results docs/queries.md gives for these files, computed by `reference` (one of
    REFERENCES)."""
    if reference not in REFERENCES:
        raise UnknownReferenceError(f"reference must be one of {REFERENCES}, got {reference!r}")
    if reference == "python":
        return compute_files(flights, airports)
    return _duckdb_reference(flights, airports)


def _duckdb_reference(flights: Path, airports: Path) -> ReferenceResults:
    from oracle.duckdb_queries import duckdb_queries  # duckdb: only when asked

    run = duckdb_queries(flights, airports)
    return ReferenceResults(**run.results, rows=run.rows, valid_rows=run.valid_rows,
                            invalid_counts=run.invalid_counts, q2_skipped=run.q2_skipped,
                            mean_fare=run.mean_fare)


def write_with_malformed_lines(clean: Path, dirty: Path) -> int:
    """Copies the flights file `clean` to `dirty` with UNDECODABLE_LINE and SHORT_LINE in the
    middle, streaming (the full dataset's 7 GB never sit in memory); `dirty`'s data lines."""
    middle = count_lines(clean) // 2
    lines = 0
    with open(clean, "rb") as source, open(dirty, "wb") as target:
        for number, line in enumerate(source):
            if number == middle:
                target.write(UNDECODABLE_LINE + SHORT_LINE)
                lines += 2
            target.write(line)
            lines += 1
    return lines - 1  # the header is no data line


def count_lines(path: Path, chunk_bytes: int = 1 << 20) -> int:
    """Lines of a file as `bytes.splitlines` counts them for "\n"-ended lines (a last line
    without its newline counts too), read in chunks."""
    count, last = 0, b"\n"
    with open(path, "rb") as file:
        while chunk := file.read(chunk_bytes):
            count += chunk.count(b"\n")
            last = chunk[-1:]
    return count + (last != b"\n")


def session_problems(results_dir: Path, data: SessionData) -> list[str]:
    """Why the session in `results_dir` is not exact ([] when it is): q1.csv ... q4.csv equal
    the reference row for row, summary.json says completed, the malformed lines were rejected,
    and every data line was either sent once or rejected once (resumed sessions included)."""
    problems = []
    for query, expected in data.reference.by_query().items():
        try:
            with open(results_dir / f"{query}.csv", newline="") as file:
                header, *rows = csv.reader(file)
        except (FileNotFoundError, ValueError) as error:  # missing, or empty (no header)
            problems.append(f"{query}.csv: {type(error).__name__}: {error}")
            continue
        if tuple(header) != QUERY_COLUMNS[query]:
            problems.append(f"{query}.csv header {header}, expected {QUERY_COLUMNS[query]}")
            continue
        problems += result_differences(query, rows, expected)
    try:
        summary = json.loads((results_dir / "summary.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError) as error:
        return [*problems, f"summary.json: {type(error).__name__}: {error}"]
    if summary.get("status") != "completed":
        problems.append(f"summary status {summary.get('status')!r}, expected 'completed'")
    rejected = summary.get("rows_rejected", {}).get("flights", {})
    if rejected.get("undecodable_bytes", 0) < 1 or rejected.get("wrong_field_count", 0) < 2:
        problems.append(f"the malformed lines were not all rejected: {rejected}")
    accounted = summary.get("rows_sent", {}).get("flights", 0) + sum(rejected.values())
    if accounted != data.flight_lines:
        problems.append(f"{accounted} flight lines sent or rejected, "
                        f"the file has {data.flight_lines}")
    return problems[:PROBLEMS_SHOWN_MAX] + (
        [f"... and {len(problems) - PROBLEMS_SHOWN_MAX} more"]
        if len(problems) > PROBLEMS_SHOWN_MAX else [])
