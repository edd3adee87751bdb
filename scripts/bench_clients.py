"""Many clients at once against one client alone, on the embedded default.

    python -m scripts.bench_clients [--clients 8] [--rows 250000] [--seed 1]
        [--invalid-rate 0.01] [--work-dir DIR] [--master local[2]]

One platform (`scripts.run_local`'s: three health checkers, three brokers, the query service
on `--master`); each client gets its own generated sample (`--rows` rows, seed + i). On the
warm service (a first session, not counted, pays the JVM's compilation):
1. **alone**: client-1's data, one session: its rows over its wall time (start of the client
   process to its exit, results saved).
2. **together**: every client started at once, each on its own data: the aggregate rows/s
   (all rows over first start to last exit), each client's own rows/s, and the slowest over
   the fastest (1.0: all served alike; the target is >= 0.5, and aggregate >= alone).
Every client's q1.csv ... q4.csv must equal DuckDB's on its own data (result_gate.py), else the
run fails (exit 1). Prints a table and one JSON line (`"bench": "clients"`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from scripts.bench.clients import CLIENTS_DEFAULT, ROWS_DEFAULT, ClientsSettings, bench, print_table
from scripts.bench.errors import BenchError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.bench_clients",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=CLIENTS_DEFAULT)
    parser.add_argument("--rows", type=int, default=ROWS_DEFAULT, help="rows per client")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--invalid-rate", type=float, default=0.01)
    parser.add_argument("--work-dir", type=Path, default=None)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args(argv)
    if args.clients < 1 or args.rows < 1:
        parser.error("--clients and --rows must be >= 1")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="bench-clients-"))
    try:
        result = bench(ClientsSettings(args.clients, args.rows, args.seed, args.invalid_rate,
                                       work_dir, args.master))
    except BenchError as error:
        print(f"bench_clients failed: {type(error).__name__}: {error}", file=sys.stderr,
              flush=True)
        return 1
    print_table(result)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
