"""Q1-Q4 from the CSV files against Q1-Q4 through the `kaska` source, in one Spark application.

    python -m scripts.bench_queries --rows N [--seed S] [--data-dir DIR] [--slice-rows R]
        [--partitions P] [--master local[2]] [--repeats K] [--warmups W]

Generates N rows (unless DIR already holds them; 1 % malformed), starts a broker on 127.0.0.1
(a child process, any free port), loads airports and flights into `airports.<cid>` /
`flights.<cid>` the way a client does (untimed): Arrow IPC payloads of R CSV rows each (default
300, the client's default), one Kaska record batch per payload, spread round-robin over P
partitions. After W untimed warm-up runs of each path (JIT, Python workers; default 1), K times
each, alternating, it times
  (a) `csv`:   Spark reads both CSV files and computes the four queries,
  (b) `kaska`: Spark reads both topics through the `kaska` source over the loaded offset
               ranges and computes the same four queries,
where "computes" means: every query's rows collected to the driver (plus the counts job), as
the query service does. It prints one JSON line: the medians, every run, and kaska/csv.

Also the loader used by the service tests: `produce_session` writes a whole client session
(topics, SessionStarted, data batches, SessionEnded) with the client library directly.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from scripts.bench.queries import (
    PARTITIONS_DEFAULT,
    REPO,
    SLICE_ROWS_DEFAULT,
    QueriesBenchSettings,
    bench,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.bench_queries",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--invalid-rate", type=float, default=0.01)
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--slice-rows", type=int, default=SLICE_ROWS_DEFAULT)
    parser.add_argument("--partitions", type=int, default=PARTITIONS_DEFAULT)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmups", type=int, default=1, help="untimed runs of each path first")
    args = parser.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    print(json.dumps(bench(QueriesBenchSettings(**vars(args)))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
