"""Start time and memory of a broker whose replication journal holds many entries, before and
after compaction (docs/benchmarks.md "Journal compaction").

    python -m scripts.bench_journal_compaction [--entries 1000000] [--repeats 3]

Builds a data directory as a long-lived broker leaves it: one topic whose partition holds
`entries` one-record batches (in 4 MiB segments), each with its BATCH journal entry, all
committed. Then:

- before: the broker (a cluster of one) is started `repeats` times on it with compaction out
  of reach (`--journal-entries-max` above the journal): the time from launch to "listening on"
  (recovery reads the journal, reconcile replays it, the node applies it), the CPU seconds
  the process spent until then (steadier than wall time on a loaded machine), and its
  resident memory (VmRSS once listening, VmHWM its peak) are recorded;
- the broker is started once with `--journal-entries-max` (default: the broker's) and left to
  compact (its log says
  "journal compacted below N"), then stopped;
- after: the same measurements, `repeats` times, on the compacted directory.

Prints one JSON line (medians, and every trial). Every broker is a child process on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json

from scripts.bench.journal_compaction import bench


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--journal-entries-max", type=int, default=100_000,
                        help="the compacting broker's bound (the broker's default)")
    args = parser.parse_args()
    print(json.dumps(bench(args.entries, args.repeats, args.journal_entries_max)))


if __name__ == "__main__":
    main()
