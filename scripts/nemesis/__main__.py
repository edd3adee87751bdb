"""`python -m scripts.nemesis`: one nemesis round (scripts/nemesis/run.py); exits 1 on any
finding, printing the seed and the schedule so the round replays, and always a JSON summary
line last."""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from scripts.nemesis.cluster import JOURNAL_ENTRIES_MAX_DEFAULT
from scripts.nemesis.run import NemesisSettings, run_nemesis
from scripts.nemesis.schedule import describe


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m scripts.nemesis", description=__doc__)
    parser.add_argument("--seconds", type=float, default=300.0,
                        help="length of the fault schedule (default 300)")
    parser.add_argument("--seed", type=int, default=None,
                        help="the schedule's seed (default: a random one, printed)")
    parser.add_argument("--brokers", type=int, default=3, help="3 or 5 (default 3)")
    parser.add_argument("--groups", type=int, default=None,
                        help="--replication-groups of the brokers (default: one per broker)")
    parser.add_argument("--topics", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--producers", type=int, default=3)
    parser.add_argument("--consumers", type=int, default=2)
    parser.add_argument("--fault-interval-s", type=float, default=3.0,
                        help="mean gap between two faults (default 3)")
    parser.add_argument("--journal-entries-max", type=int, default=JOURNAL_ENTRIES_MAX_DEFAULT,
                        help="the brokers' journal bound: compaction and snapshot installs "
                             f"(default {JOURNAL_ENTRIES_MAX_DEFAULT})")
    parser.add_argument("--converge-timeout-s", type=float, default=120.0)
    parser.add_argument("--idle-cpu-s-max", type=float, default=0.5,
                        help="CPU seconds a broker may use in the 5 s idle window")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="where the brokers' data and logs go (default: a temporary "
                             "directory, removed after a round without findings)")
    return parser.parse_args(argv)


def replay_args(args: argparse.Namespace, seed: int) -> str:
    """The command line that replays this round's schedule."""
    options = {**vars(args), "seed": seed, "work_dir": None}
    return " ".join(f"--{name.replace('_', '-')} {value:g}" if isinstance(value, float)
                    else f"--{name.replace('_', '-')} {value}"
                    for name, value in options.items() if value is not None)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.brokers < 3 or args.brokers % 2 == 0:
        print("--brokers must be odd and at least 3", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix=f"nemesis-{seed}-"))
    settings = NemesisSettings(
        seed=seed, work_dir=work_dir, seconds=args.seconds, brokers=args.brokers,
        groups=args.groups, topics=args.topics, partitions=args.partitions,
        producers=args.producers, consumers=args.consumers,
        fault_interval_s=args.fault_interval_s, journal_entries_max=args.journal_entries_max,
        converge_timeout_s=args.converge_timeout_s,
        idle_cpu_s_max=args.idle_cpu_s_max)
    print(f"nemesis: seed {seed} ({args.seconds:g} s, {args.brokers} brokers)", flush=True)
    report = run_nemesis(settings, progress=lambda text: print(
        f"nemesis {time.strftime('%H:%M:%S')}: {text}", flush=True))
    if report.findings:
        print(f"\nnemesis: {len(report.findings)} finding(s), seed {seed}; replay with: "
              f"python -m scripts.nemesis {replay_args(args, seed)}")
        print("schedule:\n" + describe(report.faults))
        for finding in report.findings:
            print(f"FINDING {finding}")
        print(f"broker logs and data: {work_dir}")
    elif args.work_dir is None:
        shutil.rmtree(work_dir, ignore_errors=True)
    print(json.dumps(report.summary()), flush=True)
    return 1 if report.findings else 0


if __name__ == "__main__":
    sys.exit(main())
