"""Q1-Q4 of QUERIES.md computed by DuckDB in one process: the pipeline benchmark's baseline.

    python -m scripts.bench_duckdb --data-dir DIR [--threads 2] [--out DIR] [--repeats K]

reads DIR/itineraries.csv and DIR/airports.csv, runs load + Q1-Q4 K times (each in a fresh
in-memory database) and prints one JSON line: the median seconds (load, queries, total), the
row counts, the result rows per query and the invalid rows per kind. With --out, every run
also writes q1.csv ... q4.csv there (common/result_csv.py's format).

`duckdb_queries` is the whole computation. Every input column is read as text and every rule
of QUERIES.md is written in SQL, with the decisions `spark/queries.py` documents for what the
contract leaves open (and tests/reference_queries.py shares):
- numbers are plain decimal literals (`NUMBER_REGEX`), then DuckDB's cast to DOUBLE;
- `travelDuration` is `P[nD][T[nH][nM][nS]]`, at least one component, each of at most 9
  digits; seconds count in whole minutes, floored;
- an airport is known when its code is non-empty and both coordinates are finite numbers; a
  code listed twice keeps its smallest (latitude, longitude);
- Q1's `totalFare` is the parsed double;
- Q3 breaks ties by duration, legId, totalFare, then stopovers, then travelDuration.
DuckDB's regexes are RE2: `$` is the very end of the text (Java's `\\z`), so a value with a
trailing newline matches none of them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from scripts.bench.duckdb_queries import DEFAULT_REPEATS, DEFAULT_THREADS, duckdb_queries, summary
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
