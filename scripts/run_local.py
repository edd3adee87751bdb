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
   printed), supervised like the rest. Logs: DIR/run/logs/<name>.log.
2. Without --flights/--airports it generates a sample (`--rows`, default 200k, with malformed
   rows) in DIR/sample (reused when present with the same parameters); with `--clients K > 1`
   each client gets its own sample (seed + i), so each session's results are its own.
3. Runs K client sessions at once, each registered too, with a client id chosen here so that a
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

The parts live in scripts/local/ (one module per concern); this module parses the flags and
wires them together, and re-exports the parts' names.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from healthchecker.local_registry import RegistryError
from scripts import killer
from scripts.local.brokers import (
    BROKERS_DEFAULT,
    BROKERS_MAX,
    BrokerNode,
    broker_argv,
    broker_count_error,
)
from scripts.local.chaos import ChaosThread, wait_for_heals
from scripts.local.console import say
from scripts.local.errors import RunLocalError
from scripts.local.layout import CHECKER_PREFIX, SERVICE_NAME, RunLayout, broker_name
from scripts.local.platform import HEALTHCHECKERS, REPO, LocalPlatform
from scripts.local.ports import free_ports
from scripts.local.report import (
    LogTail,
    describe_session,
    describe_timings,
    print_report,
    restarts_in_logs,
)
from scripts.local.sample_data import InputFiles, sample_files
from scripts.local.sessions import (
    ClientRun,
    ClientSettings,
    client_argv,
    client_outcome,
    plan_clients,
    read_client_summary,
    wait_for_sessions,
)
from scripts.victims import PICKERS

__all__ = [
    "BROKERS_DEFAULT", "BROKERS_MAX", "CHECKER_PREFIX", "HEALTHCHECKERS", "REPO", "SERVICE_NAME",
    "BrokerNode", "ChaosThread", "ClientRun", "ClientSettings", "InputFiles", "LocalPlatform",
    "LogTail",
    "RunLayout", "RunLocalError", "broker_argv", "broker_count_error", "broker_name",
    "build_parser", "client_argv", "client_outcome", "describe_session", "describe_timings",
    "free_ports", "install_signal_handlers", "main", "parse_args", "plan_clients",
    "print_report", "read_client_summary", "restarts_in_logs", "run", "sample_files", "say",
    "start_platform", "wait_for_sessions",
]

ROWS_DEFAULT = 200_000
SEED_DEFAULT = 1
INVALID_RATE_DEFAULT = 0.01
TIMEOUT_S_DEFAULT = 1800.0
STOP_TIMEOUT_S_DEFAULT = 10.0
CHAOS_DURATION_S_DEFAULT = 60.0
HEAL_TIMEOUT_S_DEFAULT = 120.0


def start_platform(platform: LocalPlatform) -> None:
    say(f"starting the platform on 127.0.0.1 (logs in {platform.layout.logs_dir})")
    platform.start_checkers()
    platform.start_brokers()
    platform.wait_for_brokers()
    platform.start_service()
    platform.start_status()


def run(args: argparse.Namespace, interrupted: threading.Event) -> int:
    started = time.monotonic()
    layout = RunLayout(args.results_dir.resolve(),
                       (args.data_dir or args.results_dir / "run" / "broker-data").resolve(),
                       keep_broker_data=args.data_dir is not None)
    layout.prepare()
    platform = LocalPlatform(layout, args.master, args.brokers, args.status_port)
    chaos = None
    unhealed = []
    try:
        start_platform(platform)
        runs = plan_clients(args)  # generates samples while Spark starts
        say(f"  query service ready after {platform.wait_for_service():.1f} s")
        if args.chaos_interval_s:
            say(f"chaos: a fault every {args.chaos_interval_s:g} s for at most "
                f"{args.chaos_duration_s:g} s ({args.chaos_pause_ratio:g} of them pauses, "
                f"victims {args.chaos_victims})")
            chaos = ChaosThread(killer.LocalBackend(layout.registry_dir), args.chaos_interval_s,
                                args.chaos_duration_s, args.chaos_seed,
                                args.chaos_pause_ratio, args.chaos_victims).start()
        sessions_started = time.monotonic()
        settings = ClientSettings(args.batch_rows, args.partitions,
                                  args.client_upload_rows_per_s_max)
        foreground = len(runs) == 1 and chaos is None and sys.stdout.isatty()
        for client in runs:
            platform.register(client.name, client_argv(client, platform, settings))
            pid = platform.spawn(client.name, foreground=foreground)
            say(f"  started {client.name:<16} pid {pid:<7} session {client.client_id}")
        tail = None if foreground else LogTail({r.name: layout.log_path(r.name) for r in runs})
        wait_for_sessions(runs, platform, args.timeout_s, tail, interrupted)
        sessions_s = time.monotonic() - sessions_started
        if chaos is not None:
            chaos.stop()
            unhealed = wait_for_heals(chaos.faults, platform.registry, args.heal_timeout_s)
        if args.keep_running and not interrupted.is_set():
            say("sessions over; the platform keeps running until SIGINT or SIGTERM")
            interrupted.wait()
    finally:
        if chaos is not None:
            chaos.stop()
        say("stopping everything this run started")
        platform.stop_all(args.stop_timeout_s)
    return print_report(runs, layout, chaos, unhealed, sessions_s, time.monotonic() - started)


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
    add("--batch-rows", type=int, default=300)
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
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if (args.flights is None) != (args.airports is None):
        parser.error("--flights and --airports go together")
    if not 0 <= args.status_port <= 65535:
        parser.error(f"--status-port must lie in [0, 65535], got {args.status_port}")
    if args.clients < 1 or args.rows < 0 or args.batch_rows < 1 or args.partitions < 1:
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
        return run(args, interrupted)
    except (RunLocalError, RegistryError, OSError) as error:
        say(f"run_local failed: {error}")
        return 1
    finally:
        restore()


if __name__ == "__main__":
    sys.exit(main())
