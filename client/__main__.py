"""`python -m client --flights F --airports A --brokers H:P[,H:P] --results-dir DIR ...`

One client session (client/runner.py): upload both files, wait for Q1-Q4, write
DIR/q1.csv ... q4.csv, DIR/summary.json and DIR/report.html. `--client-id` resumes an earlier
session (its checkpoint lives in `--state-dir`, default DIR/state). Result rows and progress go
to stdout, logs to stderr.

Before the session starts (before a session id, a topic or a broker connection), both files
are checked: a file that is missing, not a regular file, unreadable, empty, without the
columns the queries read (docs/queries.md "Inputs") or whose first block holds no readable row
is refused with one line on stderr naming it (client/input_check.py). Malformed rows inside a
file that passes are counted and reported, not refused.

Exit status: 0 when the session completed; 1 when it failed; 3 when SIGTERM/SIGINT stopped it
first (its progress is checkpointed: run again with the same --client-id to continue); 2 for
bad arguments or a refused input file. With `--heartbeat-targets`, it heartbeats the health
checkers while it runs and says goodbye on any deliberate exit, so only a killed client is
restarted.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import uuid
from pathlib import Path

from client.csv_reader import SLICE_BYTES_DEFAULT, SLICE_ROWS_MAX
from client.input_check import InputFileError, check_input_files
from client.progress import make_progress
from client.report import STATUS_COMPLETED, STATUS_INTERRUPTED
from client.runner import (
    CHECKPOINT_INTERVAL_S_DEFAULT,
    PARTITIONS_DEFAULT,
    ClientConfig,
    run_session,
)
from client.upload_window import POLL_INTERVAL_S_DEFAULT, WINDOW_BYTES_DEFAULT
from common.cluster_secret import ClusterSecretError
from common.heartbeat import HeartbeatConfigError, heartbeat_secret
from common.kaska.cluster import parse_brokers
from common.service_cli import (
    add_heartbeat_flags,
    add_log_level_flag,
    configure_logging,
    handle_stop_signals,
    start_heartbeats,
)

EXIT_COMPLETED, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 3
TOKEN_ENV = "KASKA_TOKEN"
SLICE_BYTES_MAX = 16 * 1024 * 1024  # its payload fits a produce request and decodes within bounds
PARTITIONS_MAX = 1024
WINDOW_BYTES_MAX = 1 << 50


def _client_id(text: str) -> str:
    try:
        return str(uuid.UUID(text))
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"a client id is a UUID, got {text!r}") from error


def _bounded_int(low: int, high: int):
    def parse(text: str) -> int:
        value = int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must lie in [{low}, {high}], got {value}")
        return value
    return parse


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:  # NaN too
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _brokers(text: str) -> str:
    try:
        parse_brokers(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m client", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--flights", type=Path, required=True, help="itineraries CSV (Kaggle layout)")
    add("--airports", type=Path, required=True, help="airports CSV (Opendatahub layout)")
    add("--brokers", type=_brokers, required=True, help="HOST:PORT[,HOST:PORT...]")
    add("--results-dir", type=Path, required=True)
    add("--batch-rows", type=_bounded_int(1, SLICE_ROWS_MAX), default=None,
        help="rows per message (default: as many as make --slice-bytes of the flights file)")
    add("--slice-bytes", type=_bounded_int(1024, SLICE_BYTES_MAX), default=SLICE_BYTES_DEFAULT,
        help=f"bytes of CSV text per message when --batch-rows is not given (default "
             f"{SLICE_BYTES_DEFAULT})")
    add("--client-id", type=_client_id, help="resume this session (default: a new uuid4)")
    add("--partitions", type=_bounded_int(1, PARTITIONS_MAX), default=PARTITIONS_DEFAULT)
    add("--state-dir", type=Path, help="resume checkpoints (default: RESULTS_DIR/state)")
    add_heartbeat_flags(parser, targets_help="HOST:PORT[,...]")
    add("--secret-file", type=Path, default=None,
        help="file holding the cluster secret the heartbeats are signed with (default: "
             "$FLIGHTS_CLUSTER_SECRET)")
    add("--name", default="client", help="service name in heartbeats (default: client)")
    add("--checkpoint-interval-s", type=float, default=CHECKPOINT_INTERVAL_S_DEFAULT)
    add("--stall-timeout-s", type=float, default=120.0,
        help="give up when the broker is unreachable this long")
    add("--results-timeout-s", type=float, default=3600.0)
    add("--upload-rows-per-s-max", type=_non_negative_float, default=0.0,
        help="upload at most this many rows a second, like a producer quota (default 0: as "
             "fast as the brokers take them)")
    add("--upload-window-bytes", type=_bounded_int(0, WINDOW_BYTES_MAX),
        default=WINDOW_BYTES_DEFAULT,
        help=f"flow control: hold the flights upload back while the brokers hold more than "
             f"this many of its payload bytes not yet folded by the query service (split "
             f"evenly over the partitions; default {WINDOW_BYTES_DEFAULT}, 0: no flow control)")
    add("--window-poll-interval-s", type=_non_negative_float, default=POLL_INTERVAL_S_DEFAULT,
        help=f"ask a partition's log start at most this often while near or over the window "
             f"(default {POLL_INTERVAL_S_DEFAULT})")
    add("--rows-shown", type=int, default=5, help="result rows printed per query")
    add_log_level_flag(parser)
    return parser


def config_from_args(args: argparse.Namespace) -> ClientConfig:
    return ClientConfig(
        flights=args.flights, airports=args.airports, brokers=args.brokers,
        results_dir=args.results_dir, client_id=args.client_id or str(uuid.uuid4()),
        batch_rows=args.batch_rows, slice_bytes=args.slice_bytes, partitions=args.partitions,
        state_dir=args.state_dir,
        checkpoint_interval_s=args.checkpoint_interval_s, stall_timeout_s=args.stall_timeout_s,
        results_timeout_s=args.results_timeout_s, rows_shown_max=args.rows_shown,
        upload_rows_per_s_max=args.upload_rows_per_s_max,
        upload_window_bytes=args.upload_window_bytes,
        window_poll_interval_s=args.window_poll_interval_s,
        token=os.environ.get(TOKEN_ENV),
    )


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        check_input_files(args.flights, args.airports)
    except InputFileError as error:
        print(f"client: {error}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    configure_logging(args.log_level)
    if logging.getLogger().level == logging.INFO:
        # The library logs every retry; common.kaska.patience already says when the broker is away.
        logging.getLogger("common.kaska").setLevel(logging.WARNING)
    config = config_from_args(args)
    stop = threading.Event()
    handle_stop_signals(stop.set)
    try:
        secret = heartbeat_secret(args.heartbeat_targets, args.secret_file)
    except (ClusterSecretError, HeartbeatConfigError) as error:
        parser.error(f"{type(error).__name__}: {error}")
    heartbeat = start_heartbeats(args.name, args.heartbeat_targets, args.heartbeat_interval_s,
                                 secret)
    print(f"client {config.client_id}: session of {config.flights} and {config.airports} "
          f"via {config.brokers}", flush=True)
    try:
        summary = run_session(config, stop, make_progress())
    finally:
        if heartbeat is not None:
            heartbeat.stop(say_goodbye=True)
    if summary.status == STATUS_COMPLETED:
        print(f"client {config.client_id}: results in {config.results_dir}/ (q1.csv ... q4.csv, "
              f"summary.json, report.html)", flush=True)
        return EXIT_COMPLETED
    print(f"client {config.client_id}: {summary.status}: {summary.error}", file=sys.stderr,
          flush=True)
    return EXIT_INTERRUPTED if summary.status == STATUS_INTERRUPTED else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
