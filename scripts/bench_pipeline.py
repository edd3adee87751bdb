"""The pipeline against Spark and DuckDB reading the CSV themselves, side by side in one run.

    python -m scripts.bench_pipeline [--rows 2000000] [--seed 1] [--invalid-rate 0.01]
        [--data-dir DIR] [--work-dir DIR] [--warm-sessions 1] [--master local[2]]
        [--skip-spark-csv] [--skip-duckdb] [--topics-gone-timeout-s 120]
        [--profile DIR [--profile-rate-hz 100] [--profile-gil]] [--perf DIR]

On one machine, one after the other (so each has the machine to itself):
1. **pipeline**: the embedded default (`scripts.run_local`'s platform: three health checkers,
   three brokers, the query service on `--master`), started and ready; then the real client
   (`python -m client`, default settings) runs one session on the fresh query service (its
   first session) and `--warm-sessions` more on the now warm one, each waiting for the last.
   Per session, from the client's own summary: upload (open to SessionEnded), query phase
   (SessionEnded to the last result), total; the CPU seconds and peak RSS of the client; the
   brokers' disk use before, at the end of the session, and once the finished session's
   topics are gone (the query service deletes them after the client acknowledged its
   results). The platform's processes (brokers, query service with its JVM and Python
   workers, checkers): CPU seconds per session and peak RSS at the end.
2. **spark-csv**: a fresh Spark application (`local[2]` unless `--master`), started in a child
   process, reads both CSV files and computes Q1-Q4 with `scripts.bench.spark_csv` (every row
   collected and formatted, as the service does): its start and its first queries, timed apart.
3. **duckdb**: `scripts.bench_duckdb` loads both files and computes Q1-Q4 in one process.
The correctness gate (scripts/bench/result_gate.py): every session's q1.csv ... q4.csv must
equal DuckDB's results as multisets of rows (numbers within docs/queries.md's 1e-9 relative), and
spark-csv's counts must agree; any difference fails the run (BenchError, exit status 1). With
`--skip-duckdb` the sessions are compared with one another only, and the output says so.

`--profile DIR`: py-spy samples every platform process and the client during each session
(scripts/bench/profile.py), one collapsed-stack file per process in DIR/session-<i>/, and the
table is followed by each process's CPU seconds and top functions by self time
(`--profile-gil`: only the thread holding the GIL, profile.py says when that is the better
measure). Sampling costs CPU: a profiled run's timings are not the yardstick.
`--perf DIR`: Linux perf on the same processes (scripts/bench/kernel_profile.py), which sees
what py-spy charges to the calling Python frame: the kernel's page faults (zeroing of fresh
pages), its system calls, and self time by library; one summary line per process.

Prints a table and one JSON line (`"bench": "pipeline"`); ratios: a session's total over
spark-csv's first queries and over DuckDB's load + queries, and upload rows/s.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from scripts.bench.errors import BenchError
from scripts.bench.pipeline import (
    ROWS_DEFAULT,
    TOPICS_GONE_TIMEOUT_S_DEFAULT,
    PipelineSettings,
    bench,
    print_table,
    spark_csv_child,
)
from scripts.bench.profile import RATE_HZ_DEFAULT


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.bench_pipeline",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=ROWS_DEFAULT)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--invalid-rate", type=float, default=0.01)
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="input files (itineraries.csv, airports.csv; generated if absent)")
    parser.add_argument("--work-dir", type=Path, default=None)
    parser.add_argument("--warm-sessions", type=int, default=1)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--skip-spark-csv", action="store_true")
    parser.add_argument("--skip-duckdb", action="store_true")
    parser.add_argument("--topics-gone-timeout-s", type=float,
                        default=TOPICS_GONE_TIMEOUT_S_DEFAULT)
    parser.add_argument("--profile", type=Path, default=None, metavar="DIR",
                        help="py-spy profile of every process per session into DIR")
    parser.add_argument("--profile-rate-hz", type=int, default=RATE_HZ_DEFAULT)
    parser.add_argument("--profile-gil", action="store_true",
                        help="sample only the thread holding the GIL (py-spy --gil)")
    parser.add_argument("--perf", type=Path, default=None, metavar="DIR",
                        help="Linux perf on every process per session into DIR: page faults, "
                             "zeroing of fresh pages, system calls, self time by library")
    parser.add_argument("--warm-up-idle-passes", type=int, default=None, metavar="N",
                        help="the query service's --warm-up-idle-passes (default: its own)")
    parser.add_argument("--after-idle-warm-up", action="store_true",
                        help="start the first session once the service's idle warm-up passes "
                             "are over (a client that comes later), not at once")
    parser.add_argument("--client-slice-bytes", type=int, default=None, metavar="BYTES",
                        help="the client's --slice-bytes (default: its own)")
    parser.add_argument("--spark-csv-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--flights", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--airports", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if args.spark_csv_child:
        print(json.dumps(spark_csv_child(args.flights, args.airports, args.master)))
        return 0
    if args.rows < 1 or args.warm_sessions < 0 or args.profile_rate_hz < 1:
        parser.error("--rows and --profile-rate-hz must be >= 1 and --warm-sessions >= 0")
    try:
        result = bench(PipelineSettings(
            args.rows, args.seed, args.invalid_rate, args.data_dir, args.work_dir,
            args.warm_sessions, args.master, args.skip_spark_csv, args.skip_duckdb,
            args.topics_gone_timeout_s, args.profile, args.profile_rate_hz, args.profile_gil,
            args.perf, args.warm_up_idle_passes, args.after_idle_warm_up,
            args.client_slice_bytes))
    except BenchError as error:
        print(f"bench_pipeline failed: {type(error).__name__}: {error}", file=sys.stderr,
              flush=True)
        return 1
    print_table(result)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
