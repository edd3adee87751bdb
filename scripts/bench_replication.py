"""Replication's price and its failover time, measured side by side in one run.

    python -m scripts.bench_replication [--records N] [--record-bytes B] [--repeats 5]
        [--failovers 20] [--failover-compare "BROKER ARGS"] [--spread-partitions 6]
        [--spread-repeats 5] [--perf DIR]

Throughput: one broker alone and a three-broker cluster (acks=all, and acks=1) run at once on
this machine, and beside them a second three-broker cluster started with
`--replication-fsync entry` (acks=all; the others run the default, `none`: docs/replication.md);
`repeats` rounds interleave them (single, cluster all, cluster one, cluster all fsync entry,
...) so the machine's noise is shared, each round producing the same pre-encoded idempotent
batches (see scripts/bench/produce.py) with up to `--in-flight` requests unanswered. The ratios
that matter are `cluster_acks_all_vs_single` = single round time / cluster round time, and
`fsync_entry_vs_none` = the acks=all round time of the default cluster / that of the `entry`
cluster (the share of throughput the fsync policy keeps), medians over rounds.

Spread: one producer per partition of a topic of `--spread-partitions` partitions, all at once
(acks=all, each on its own connection to its partition's leader), on a lone broker, on three
brokers with one replication group (one leader for every partition) and on three brokers with a
group per broker (leaders spread), interleaved `--spread-repeats` times; `spread_groups_vs_single`
= lone broker round time / spread cluster round time (the target: >= 0.8), with each
broker's CPU seconds per round and `..._busiest_broker_mb_per_cpu_s` (payload MB per CPU second
of the busiest broker: what bounds a cluster whose brokers have machines of their own) and the
leadership moves logged during the rounds. `--perf DIR` adds one round per cluster, not
counted, with every broker under Linux perf (scripts/bench/kernel_profile.py): where each
broker's CPU goes, the kernel's share included, which py-spy charges to the calling frame.

Failover: `failovers` times each, interleaved, the cluster's leader is SIGKILLed, frozen
with SIGSTOP, or stopped with SIGTERM (it hands leadership over first), between two
small batches (acks=all) of a client with the default settings (30 s request timeout, default
retries) that knows the bootstrap list; the time from the fault to the next batch acknowledged
(necessarily by a new leader) is one trial -- the longest stall a produce sees. The killed or
stopped broker is restarted, the frozen one thawed, and the cluster settles before the next
trial. Median and max reported per fault. `--failover-compare ARGS` runs every trial also on a
second cluster started with those broker arguments, right after the default one (figures
prefixed `compare_`): other timeouts measured side by side.

Prints one JSON line. Every broker is a child process on 127.0.0.1 with a temporary data dir.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from scripts.bench.replication import ReplicationSettings, bench


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m scripts.bench_replication",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--brokers", type=int, default=3, help="cluster size (odd)")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--batch-bytes", type=int, default=1024 * 1024)
    parser.add_argument("--in-flight", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--failovers", type=int, default=20)
    parser.add_argument("--spread-partitions", type=int, default=6,
                        help="partitions of the spread rounds: one producer each, at once, on "
                             "a lone broker, one replication group and a group per broker "
                             "(0: none)")
    parser.add_argument("--spread-repeats", type=int, default=5)
    parser.add_argument("--failover-compare", default="", metavar="BROKER_ARGS",
                        help="also run every failover trial on a second cluster started with "
                             "these broker arguments (one string, e.g. "
                             "'--election-timeout-ms-min 500 --election-timeout-ms-max 1000')")
    parser.add_argument("--perf", type=Path, default=None, dest="perf_dir", metavar="DIR",
                        help="after the spread rounds, one more per cluster (not counted) with "
                             "every broker under Linux perf: its files in DIR, a summary line "
                             "per broker on stderr (page faults, zeroing of fresh pages, "
                             "system calls, self time by library)")
    args = parser.parse_args(argv)
    args.failover_compare_args = tuple(shlex.split(args.failover_compare))
    del args.failover_compare
    if args.brokers < 3 or args.brokers % 2 == 0:
        parser.error("--brokers must be odd and at least 3")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print(json.dumps(bench(ReplicationSettings(**vars(args)))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
