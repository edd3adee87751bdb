"""Chaos verification: R rounds, each a fresh deployment running one client session on generated
data with malformed rows while a random service (any of them, every health checker included,
nobody spared) is SIGKILLed or paused (SIGSTOP) every N seconds.

    python -m scripts.chaos_verify --rounds 3                      # Compose (image built)
    python -m scripts.chaos_verify --local --rounds 1              # run_local's processes
    python -m scripts.chaos_verify --rounds 10 --victims round-robin --json heal.json
    python -m scripts.chaos_verify --rounds 1 --clients 8 --own-data --rows 250000
                                                # 8 sessions at once, each on its own data

Each round: the platform comes up (Compose: its own project name, volumes and results
directory), the client's session starts (`--clients N`: N clients at once, each its own session
on the same data, or with `--own-data` on data of its own, every one judged), the chaos loop
injects a fault every `--interval-s` (a pause with probability `--pause-ratio`) until the
session ends (at most
`--chaos-duration-s`), then it waits up to `--heal-wait-s` for the last faults to heal, checks
q1.csv ... q4.csv against the reference computation of docs/queries.md (oracle/reference.py,
not the Spark code) and matches every fault with its heal (heal.py: kill -> running again =
the next start of that service; -> serving again = the first heartbeat of the new instance,
or the first answered probe of a Spark daemon, in any health checker's log).

Prints each round's faults with their heal times, a table with one row per round (kills and
pauses per service, restarts the checkers logged, heal times median/max, session time from the
first fault (right after the session began) to its completion, exact),
and one row per service kind over every round (the health-checker leader apart). With
`--victims round-robin` the kinds are hit in turn, so R rounds of F faults give each of the K
kinds about R*F/K faults.

Exit status 0 only if every round's results are exact and every fault healed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from oracle.session_check import REFERENCES
from scripts.deploy import compose_file as compose_file_module
from scripts.deploy.compose_file import DEV_FILE, IMAGE_DEFAULT, DeploymentShape
from scripts.faults.victims import PICKERS
from scripts.verify.campaign import RoundTarget, run_rounds, write_json
from scripts.verify.clients_data import client_rows, prepare_own_data
from scripts.verify.rounds import (
    ChaosVerifyConfigError,
    RoundOptions,
)
from scripts.verify.session_data import prepare_session_data
from scripts.verify.table import kind_table, round_table

ROUNDS_MAX = 1000
ROWS_DEFAULT = 50_000
DATA_SEED_DEFAULT = 11
INVALID_RATE_DEFAULT = 0.02
WORK_DIR_DEFAULT = Path("results/chaos-verify")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m scripts.chaos_verify", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    defaults = RoundOptions()
    add("--rounds", type=int, default=3)
    add("--local", action="store_true", help="run_local's processes instead of Compose")
    add("--interval-s", type=float, default=defaults.interval_s, help="between two faults")
    add("--chaos-duration-s", type=float, default=defaults.chaos_duration_s,
        help="the chaos loop stops at the session's end, or after this long")
    add("--pause-ratio", type=float, default=defaults.pause_ratio,
        help="fraction of the faults that are pauses (SIGSTOP) rather than SIGKILLs")
    add("--victims", choices=sorted(PICKERS), default=defaults.victims,
        help="random: any running service; round-robin: the service kinds in turn (the client "
             "and the health-checker leader first)")
    add("--seed", type=int, help="chaos seed (round n uses seed + n)")
    add("--faults-min", type=int, default=defaults.faults_min,
        help="keep injecting after the session ended until a round has this many faults")
    add("--session-timeout-s", type=float, default=defaults.session_timeout_s)
    add("--heal-wait-s", type=float, default=defaults.heal_wait_s,
        help="after the chaos loop, how long the last faults may take to heal")
    add("--rows", type=int, default=ROWS_DEFAULT, help="rows of the generated flights")
    add("--data-seed", type=int, default=DATA_SEED_DEFAULT)
    add("--invalid-rate", type=float, default=INVALID_RATE_DEFAULT)
    add("--reference", choices=REFERENCES, default="python",
        help="what computes docs/queries.md to judge the results: the plain-Python reference "
             "(holds the rows in memory), or DuckDB (the full dataset's sizes)")
    add("--work-dir", type=Path, default=WORK_DIR_DEFAULT,
        help="data and one results directory per round")
    add("--image", default=IMAGE_DEFAULT, help="the project image (Compose)")
    add("--compose-file", type=Path, default=DEV_FILE)
    add("--clients", type=int, default=None,
        help="Compose: render the default deployment with this many clients (each its own "
             "session, all at once, every one judged) into the work directory and use it "
             "instead of --compose-file")
    add("--own-data", action="store_true",
        help="with --clients N: each client its own generated data, client i of N "
             "--rows * (N + 1 - i) / N rows with seed --data-seed + i - 1 "
             "(scripts/verify/clients_data.py); without it they share one input")
    add("--json", type=Path, help="also write every fault and its heal to this file")
    return parser


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, RoundOptions]:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not 1 <= args.rounds <= ROUNDS_MAX:
        parser.error(f"--rounds must lie in [1, {ROUNDS_MAX}], got {args.rounds}")
    if args.rows < 1 or not 0 <= args.invalid_rate < 1:
        parser.error("--rows must be >= 1 and --invalid-rate in [0, 1)")
    if args.clients is not None and (args.local or args.clients < 1):
        parser.error("--clients N (N >= 1) is for Compose rounds")
    if args.own_data and args.clients is None:
        parser.error("--own-data needs --clients N")
    try:
        options = RoundOptions(
            interval_s=args.interval_s, chaos_duration_s=args.chaos_duration_s,
            pause_ratio=args.pause_ratio, victims=args.victims, seed=args.seed,
            faults_min=args.faults_min, session_timeout_s=args.session_timeout_s,
            heal_wait_s=args.heal_wait_s)
    except ChaosVerifyConfigError as error:
        parser.error(str(error))
    return args, options


def main(argv: list[str] | None = None) -> int:
    args, options = parse_args(argv)
    started = time.monotonic()
    where = "local processes" if args.local else \
        f"Compose ({args.clients} client(s) rendered into the work directory)" \
        if args.clients is not None else f"Compose ({args.compose_file})"
    print(f"chaos_verify: {args.rounds} round(s) on {where}, a fault every "
          f"{options.interval_s:g} s ({options.pause_ratio:g} of them pauses, victims "
          f"{options.victims}), nobody spared", flush=True)
    if args.own_data:
        data = prepare_own_data(args.work_dir, args.clients, args.rows, args.data_seed,
                                args.invalid_rate, args.reference)
        sizes = ", ".join(f"{client_rows(args.rows, args.clients, i):,}"
                          for i in range(1, args.clients + 1))
        print(f"data: each client its own, {sizes} rows with malformed ones, in "
              f"{data.directory}/client-<i>/", flush=True)
    else:
        data = prepare_session_data(args.work_dir / "data-clean", args.work_dir / "data",
                                    args.rows, args.data_seed, args.invalid_rate,
                                    args.reference)
        print(f"data: {args.rows:,} rows with malformed ones in {data.directory}", flush=True)
    compose_file = args.compose_file
    if args.clients is not None:
        compose_file = compose_file_module.write(
            DeploymentShape(clients=args.clients),
            args.work_dir / f"docker-compose-{args.clients}-clients.yaml")
        print(f"Compose: {args.clients} client(s), rendered into {compose_file}", flush=True)
    target = RoundTarget(args.work_dir, args.local, compose_file, args.image)
    results = run_rounds(target, data, options, args.rounds)
    print(f"\n{len(results)} round(s) in {time.monotonic() - started:.0f} s\n")
    print("\n".join(round_table(results)))
    print()
    print("\n".join(kind_table(results)))
    if args.json:
        write_json(args.json, results)
        print(f"\nevery fault and its heal: {args.json}")
    failed = [result.number for result in results if not result.passed]
    verdict = f"FAILED rounds: {failed}" if failed else "every round exact and every fault healed"
    print(f"\n{verdict}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
