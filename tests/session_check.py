"""One client session's input and its judgement against the reference: generated data with lines
the client's reader must reject, and every result file checked against tests/reference_queries
(QUERIES.md read independently of the Spark code).

Shared by the e2e tests (tests/e2e/conftest.py) and `python -m scripts.chaos_verify`, which
imports it from the repository root.
"""

from __future__ import annotations

import csv
import json
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


def prepare_session_data(clean: Path, dirty: Path, rows: int, seed: int,
                         invalid_rate: float) -> SessionData:
    """Generates `rows` rows into `clean`, computes their reference, and writes into `dirty`
    the same files with UNDECODABLE_LINE and SHORT_LINE in the middle of the flights."""
    generate(clean, rows=rows, seed=seed, invalid_rate=invalid_rate)
    reference = compute_files(clean / FLIGHTS_FILE, clean / AIRPORTS_FILE)
    dirty.mkdir(parents=True, exist_ok=True)
    lines = (clean / FLIGHTS_FILE).read_bytes().splitlines(keepends=True)
    middle = len(lines) // 2
    (dirty / FLIGHTS_FILE).write_bytes(
        b"".join(lines[:middle] + [UNDECODABLE_LINE, SHORT_LINE] + lines[middle:]))
    (dirty / AIRPORTS_FILE).write_bytes((clean / AIRPORTS_FILE).read_bytes())
    # Containers' clients run as the calling user; others (the image's user) only read.
    dirty.chmod(0o755)
    return SessionData(dirty, reference)


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
    data_lines = len((data.directory / FLIGHTS_FILE).read_bytes().splitlines()) - 1
    accounted = summary.get("rows_sent", {}).get("flights", 0) + sum(rejected.values())
    if accounted != data_lines:
        problems.append(f"{accounted} flight lines sent or rejected, the file has {data_lines}")
    return problems[:PROBLEMS_SHOWN_MAX] + (
        [f"... and {len(problems) - PROBLEMS_SHOWN_MAX} more"]
        if len(problems) > PROBLEMS_SHOWN_MAX else [])
