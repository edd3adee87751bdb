"""Running `python -m scripts.run_local` from tests and checking its sessions' results."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

from oracle.reference import compute_files
from oracle.result_compare import assert_same_results
from scripts.datagen.generate import generate

REPO = Path(__file__).resolve().parents[2]
UNDECODABLE_LINE = b"\xff\xfebad" + b",x" * 26 + b"\n"
WRONG_FIELDS_LINE = b"only,three,fields\n"


def run_local_command(results_dir: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "scripts.run_local", "--results-dir", str(results_dir), *args]


def start_run_local(results_dir: Path, output: Path, *args: str) -> subprocess.Popen:
    with open(output, "wb") as out:
        return subprocess.Popen(run_local_command(results_dir, *args), cwd=REPO, stdout=out,
                                stderr=subprocess.STDOUT)


def run_run_local(results_dir: Path, output: Path, timeout_s: float,
                  *args: str) -> tuple[int, str]:
    process = start_run_local(results_dir, output, *args)
    try:
        code = process.wait(timeout_s)
    finally:
        if process.poll() is None:
            process.terminate()  # run_local stops what it started on SIGTERM
            process.wait(60)
    return code, output.read_text(errors="replace")


def dirty_copy(flights: Path, out: Path, after_line: int = 1000) -> Path:
    """`flights` with one undecodable row and one short row inserted: the reader rejects
    both, so the results must equal the reference of the clean file."""
    lines = flights.read_bytes().splitlines(keepends=True)
    out.write_bytes(b"".join(lines[:after_line] + [UNDECODABLE_LINE, WRONG_FIELDS_LINE]
                             + lines[after_line:]))
    return out


def generated(directory: Path, rows: int, seed: int, invalid_rate: float = 0.02):
    return generate(directory, rows=rows, seed=seed, invalid_rate=invalid_rate)


def summary_of(results_dir: Path) -> dict:
    return json.loads((results_dir / "summary.json").read_text())


def assert_results_match_reference(results_dir: Path, flights: Path, airports: Path) -> None:
    """q1.csv ... q4.csv equal the plain-Python reference of docs/queries.md row for row."""
    reference = compute_files(flights, airports)
    for query, expected in reference.by_query().items():
        with open(results_dir / f"{query}.csv", newline="") as file:
            header, *rows = csv.reader(file)
        assert_same_results(query, rows, expected)
