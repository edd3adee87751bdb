"""The embedded default: the whole platform as local processes on 127.0.0.1, one run of it.

    python -m scripts.run_local --results-dir DIR [--flights F --airports A] [--data-dir DIR]
        [--rows N] [--clients K] [--brokers N] [--chaos-interval-s N] ...

1. Starts three health checkers (process backend), a Kaska cluster of `--brokers` brokers
   (default 3, an odd number: broker-1..broker-N, each with its own port and data directory,
   each naming the others with `--peers`) and the query service (Spark `local[2]`) on free
   ports of 127.0.0.1. Every process is registered in a local service registry
   (DIR/run/registry, see healthchecker/local_registry.py) with its full command line, so the
   health-checker leader can restart whatever dies, and every service heartbeats the three
   checkers (each broker as broker-<i>). The query service and the clients get every broker
   as their bootstrap list. Before the query service starts, every broker must have printed
   its "listening" line and the cluster must have a leader (it must take a topic creation).
   Then the live status page (services/status, on `--status-port` or a free port; its URL is
   printed), supervised like the rest. Logs: DIR/run/logs/<name>.log. With
   `--prometheus-targets FILE`, once the query service is up, every /metrics endpoint is
   written to FILE for a local Prometheus (file_sd JSON, one group per process).
2. Without --flights/--airports it generates a sample (`--rows`, default 200k, with malformed
   rows) in DIR/sample (reused when present with the same parameters); with `--clients K > 1`
   each client gets its own sample (seed + i), so each session's results are its own;
   `--client-rows N1,N2,...` sizes each client's sample (and sets K).
3. Runs K client sessions at once (or `--client-start-interval-s S` apart, so later clients
   join sessions under way), each registered too, with a client id chosen here so that a
   restarted client resumes its session. One client writes to DIR; several to DIR/client-<i>.
4. With `--chaos-interval-s N`, runs the killer's chaos loop (local backend) for at most
   `--chaos-duration-s`: every N seconds a live process of the deployment is SIGKILLed (or
   paused with SIGSTOP: `--chaos-pause-ratio`), any broker, the health-checker leader and the
   clients included, but never the last live health checker (nothing would be left to restart
   anything). Victims are random, or the service kinds in turn with `--chaos-victims
   round-robin` (the client and the leader first).
5. Waits until every session completed (its summary.json says so) or failed, or `--timeout-s`
   passed; with chaos, stops the loop and waits (at most `--heal-timeout-s`) until every
   instance it hit was replaced; with `--keep-running`, leaves the platform (and its status
   page) up until SIGINT or SIGTERM, as `make docker-compose-up` leaves its deployment; then
   stops everything it started: health checkers first (so nothing is restarted meanwhile),
   the brokers last, SIGTERM, then SIGKILL after `--stop-timeout-s`.

Exit status 0 only if every session completed and every chaos fault healed. Output: what
started where, upload progress, the sessions' outcome and timings, kills and restarts, where
the results are.

The launcher lives in scripts/launcher/ (one module per concern, `run` wires them together);
this module parses the flags into a LaunchConfig and calls it.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from healthchecker.local_registry import RegistryError
from scripts.faults.victims import PICKERS
from scripts.launcher.brokers import BROKERS_DEFAULT, BROKERS_MAX, broker_count_error
from scripts.launcher.config import (
    CHAOS_DURATION_S_DEFAULT,
    HEAL_TIMEOUT_S_DEFAULT,
    INVALID_RATE_DEFAULT,
    ROWS_DEFAULT,
    SEED_DEFAULT,
    STOP_TIMEOUT_S_DEFAULT,
    TIMEOUT_S_DEFAULT,
    LaunchConfig,
)
from scripts.launcher.console import say
from scripts.launcher.errors import RunLocalError
from scripts.launcher.run import run

__all__ = ["build_parser", "install_signal_handlers", "main", "parse_args"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m scripts.run_local", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--results-dir", type=Path, required=True)
    add("--flights", type=Path, help="itineraries CSV (default: a generated sample)")
    add("--airports", type=Path, help="airports CSV (with --flights)")
    add("--data-dir", type=Path, help="keep the brokers' data here, in DATA_DIR/broker-<i> "
        "(default: fresh, under RESULTS_DIR/run)")
    add("--brokers", type=int, default=BROKERS_DEFAULT,
        help=f"brokers in the Kaska cluster, odd, 1..{BROKERS_MAX} (default {BROKERS_DEFAULT})")
    add("--rows", type=int, default=ROWS_DEFAULT, help="rows of the generated sample")
    add("--seed", type=int, default=SEED_DEFAULT)
    add("--invalid-rate", type=float, default=INVALID_RATE_DEFAULT,
        help="share of malformed rows in the generated sample")
    add("--clients", type=int, default=1)
    add("--client-rows", type=_rows_list, default=None, metavar="N1,N2,...",
        help="rows of each client's generated sample, one number per client (sets --clients)")
    add("--client-start-interval-s", type=float, default=0.0,
        help="start the clients this many seconds apart, so later ones join running sessions")
    add("--batch-rows", type=int, default=None,
        help="rows per client message (default: the client's, ~1 MiB of CSV text a message)")
    add("--partitions", type=int, default=4)
    add("--master", default="local[2]")
    add("--status-port", type=int, default=0,
        help="port of the live status page on 127.0.0.1 (default: a free one, printed)")
    add("--chaos-interval-s", type=float, default=0.0, help="SIGKILL a random process every N s")
    add("--chaos-duration-s", type=float, default=CHAOS_DURATION_S_DEFAULT)
    add("--chaos-seed", type=int)
    add("--chaos-pause-ratio", type=float, default=0.0,
        help="fraction of the chaos faults that are pauses (SIGSTOP) instead of SIGKILLs")
    add("--chaos-victims", choices=sorted(PICKERS), default="random",
        help="random: any live process; round-robin: the service kinds in turn, the client "
             "and the health-checker leader first")
    add("--heal-timeout-s", type=float, default=HEAL_TIMEOUT_S_DEFAULT,
        help="after the sessions, wait at most this long for the chaos faults to heal")
    add("--client-upload-rows-per-s-max", type=float, default=0.0,
        help="the clients' upload ceiling (client --upload-rows-per-s-max; 0: none)")
    add("--keep-running", action="store_true",
        help="after the sessions, keep the platform up until SIGINT or SIGTERM")
    add("--timeout-s", type=float, default=TIMEOUT_S_DEFAULT)
    add("--stop-timeout-s", type=float, default=STOP_TIMEOUT_S_DEFAULT)
    add("--prometheus-targets", type=Path, default=None, metavar="FILE",
        help="once the platform listens, write its /metrics endpoints (brokers, health "
             "checkers, query service) to FILE as Prometheus file_sd JSON, for a local "
             "Prometheus' file_sd_configs (scripts/launcher/prometheus_targets.py)")
    return parser


def _rows_list(text: str) -> tuple[int, ...]:
    try:
        rows = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of rows: {text!r}") \
            from None
    if any(count < 0 for count in rows):
        raise argparse.ArgumentTypeError(f"rows must be >= 0: {text!r}")
    return rows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.client_rows is not None:
        if args.flights is not None:
            parser.error("--client-rows sizes generated samples: not with --flights")
        args.clients = len(args.client_rows)
    if args.client_start_interval_s < 0:
        parser.error("--client-start-interval-s must be >= 0")
    if (args.flights is None) != (args.airports is None):
        parser.error("--flights and --airports go together")
    if not 0 <= args.status_port <= 65535:
        parser.error(f"--status-port must lie in [0, 65535], got {args.status_port}")
    if (args.clients < 1 or args.rows < 0 or args.partitions < 1
            or (args.batch_rows is not None and args.batch_rows < 1)):
        parser.error("--clients, --batch-rows and --partitions must be >= 1, --rows >= 0")
    if args.chaos_interval_s < 0 or args.chaos_duration_s < 0 or args.heal_timeout_s < 0:
        parser.error("chaos interval, chaos duration and heal timeout must be >= 0")
    if not args.client_upload_rows_per_s_max >= 0:
        parser.error("--client-upload-rows-per-s-max must be >= 0")
    if not 0 <= args.chaos_pause_ratio <= 1:
        parser.error(f"--chaos-pause-ratio must lie in [0, 1], got {args.chaos_pause_ratio:g}")
    problem = broker_count_error(args.brokers)
    if problem is not None:
        parser.error(problem)
    return args


def install_signal_handlers(interrupted: threading.Event) -> Callable[[], None]:
    previous = {signum: signal.signal(signum, lambda *_: interrupted.set())
                for signum in (signal.SIGINT, signal.SIGTERM)}

    def restore() -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    return restore


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    interrupted = threading.Event()
    restore = install_signal_handlers(interrupted)
    try:
        return run(LaunchConfig(**vars(args)), interrupted)
    except (RunLocalError, RegistryError, OSError) as error:
        say(f"run_local failed: {error}")
        return 1
    finally:
        restore()


if __name__ == "__main__":
    sys.exit(main())
