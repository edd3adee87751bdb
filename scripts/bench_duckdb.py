"""Q1-Q4 of docs/queries.md computed by DuckDB in one process: the pipeline benchmark's baseline.

    python -m scripts.bench_duckdb --data-dir DIR [--threads 2] [--out DIR] [--repeats K]

reads DIR/itineraries.csv and DIR/airports.csv, runs load + Q1-Q4 K times (each in a fresh
in-memory database) and prints one JSON line: the median seconds (load, queries, total), the
row counts, the result rows per query and the invalid rows per kind. With --out, every run
also writes q1.csv ... q4.csv there (common/flights/result_csv.py's format).

The computation, and the decisions it makes where docs/queries.md leaves them open:
oracle/duckdb_queries.py.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from oracle.duckdb_queries import DEFAULT_REPEATS, DEFAULT_THREADS, duckdb_queries, summary
from scripts.datagen.generate import AIRPORTS_FILE, FLIGHTS_FILE


def _at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.bench_duckdb",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, required=True,
                        help=f"directory holding {FLIGHTS_FILE} and {AIRPORTS_FILE}")
    parser.add_argument("--threads", type=_at_least_one, default=DEFAULT_THREADS,
                        help=f"DuckDB worker threads (default {DEFAULT_THREADS})")
    parser.add_argument("--out", type=Path, default=None,
                        help="write q1.csv ... q4.csv here (every run; timed as 'write')")
    parser.add_argument("--repeats", type=_at_least_one, default=DEFAULT_REPEATS,
                        help=f"runs to take the median of (default {DEFAULT_REPEATS})")
    args = parser.parse_args(argv)
    flights, airports = args.data_dir / FLIGHTS_FILE, args.data_dir / AIRPORTS_FILE
    runs = [duckdb_queries(flights, airports, args.threads, args.out)
            for _ in range(args.repeats)]
    print(json.dumps(summary(runs, args.threads)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
