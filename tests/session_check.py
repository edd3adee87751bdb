"""One client session's input and its judgement against the reference: generated data with lines
the client's reader must reject, and every result file checked against tests/reference_queries
(QUERIES.md read independently of the Spark code).

Shared by the e2e tests (tests/e2e/conftest.py) and `python -m scripts.chaos_verify`, which
imports it from the repository root.
"""

from __future__ import annotations

import csv
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from scripts.datagen.generate import AIRPORTS_FILE, FLIGHTS_FILE, generate
from tests.reference_queries import ReferenceResults, compute_files
from tests.result_compare import QUERY_COLUMNS, result_differences

# Lines the client's reader must reject before anything reaches the broker (the generator's
# invalid rows are well-formed CSV that the queries reject; these are not even that).
UNDECODABLE_LINE = b"\xff\xfe\xfdbad" + b",x" * 26 + b"\n"
SHORT_LINE = b"only,three,fields\n"
PROBLEMS_SHOWN_MAX = 20


@dataclass(frozen=True)
class SessionData:
    directory: Path  # holds FLIGHTS_FILE (with the malformed lines) and AIRPORTS_FILE
    reference: ReferenceResults  # of the file without the malformed lines

    def of(self, client: str) -> SessionData:
        """Shared input: every client of a round runs this same data (scripts/verify/
        clients_data.py gives each client its own)."""
        return self


# The reference computations of QUERIES.md: the plain-Python one (tests/reference_queries.py,
# holds every valid row in memory: fine up to a few million rows) and DuckDB's
# (scripts/bench/duckdb_queries.py, held to the Python one by tests/unit/scripts/bench/
# test_bench_duckdb.py), for the full dataset's sizes.
REFERENCES = ("python", "duckdb")


def prepare_session_data(clean: Path, dirty: Path, rows: int, seed: int,
                         invalid_rate: float, reference: str = "python") -> SessionData:
    """Generates `rows` rows into `clean`, computes their reference (`reference`: one of
    REFERENCES), and writes into `dirty` the same files with UNDECODABLE_LINE and SHORT_LINE in
    the middle of the flights, streaming (the full dataset's 7 GB never sit in memory)."""
    if reference not in REFERENCES:
        raise ValueError(f"reference must be one of {REFERENCES}, got {reference!r}")
    generate(clean, rows=rows, seed=seed, invalid_rate=invalid_rate)
    results = compute_files(clean / FLIGHTS_FILE, clean / AIRPORTS_FILE) \
        if reference == "python" else _duckdb_reference(clean)
    dirty.mkdir(parents=True, exist_ok=True)
    middle = count_lines(clean / FLIGHTS_FILE) // 2
    with open(clean / FLIGHTS_FILE, "rb") as source, \
            open(dirty / FLIGHTS_FILE, "wb") as target:
        for number, line in enumerate(source):
            if number == middle:
                target.write(UNDECODABLE_LINE + SHORT_LINE)
            target.write(line)
    shutil.copyfile(clean / AIRPORTS_FILE, dirty / AIRPORTS_FILE)
    # Containers' clients run as the calling user; others (the image's user) only read.
    dirty.chmod(0o755)
    return SessionData(dirty, results)


def _duckdb_reference(clean: Path) -> ReferenceResults:
    from scripts.bench.duckdb_queries import duckdb_queries  # duckdb: only when asked

    run = duckdb_queries(clean / FLIGHTS_FILE, clean / AIRPORTS_FILE)
    return ReferenceResults(**run.results, rows=run.rows, valid_rows=run.valid_rows,
                            invalid_counts=run.invalid_counts, q2_skipped=run.q2_skipped,
                            mean_fare=run.mean_fare)


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
    data_lines = count_lines(data.directory / FLIGHTS_FILE) - 1
    accounted = summary.get("rows_sent", {}).get("flights", 0) + sum(rejected.values())
    if accounted != data_lines:
        problems.append(f"{accounted} flight lines sent or rejected, the file has {data_lines}")
    return problems[:PROBLEMS_SHOWN_MAX] + (
        [f"... and {len(problems) - PROBLEMS_SHOWN_MAX} more"]
        if len(problems) > PROBLEMS_SHOWN_MAX else [])
