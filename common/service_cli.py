"""The command-line plumbing every service shares: its common flags, logging and stop signals.

Owns: the flags the services (broker, query service, health checker, status page, client)
spell alike -- `--heartbeat-targets`, `--heartbeat-interval-s`, `--log-level`,
`--metrics-listen`, `--healthz-stale-s` -- with their argparse types; `configure_logging`;
`handle_stop_signals` (SIGTERM and SIGINT ask for a graceful stop); `start_heartbeats` (the
heartbeat sender a service runs beside itself when it has targets).

Invariants: a flag has the same name, default and meaning in every service (Compose and
scripts/ pass them alike); a bad value is an argparse error naming the flag (exit 2), never a
traceback or an `assert` deeper down: intervals are positive and finite, log levels are
logging's names (any case), targets are HOST:PORT[,...], metrics addresses HOST:PORT.

Threads: the parsing and the set-up run on the main thread at start-up. A stop-signal handler
runs on the main thread (Python's rule) and only calls the given `stop`, which must be safe
to call there at any moment (set an event, flag a server).
"""

from __future__ import annotations

import argparse
import logging
import signal
from collections.abc import Callable

from common.address import parse_host_ports
from common.config_flags import positive_s
from common.heartbeat import HeartbeatSender
from common.liveness import HEALTHZ_STALE_FLAG, STALE_AFTER_S_DEFAULT
from common.metrics_http import metrics_listen_arg

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_LEVEL_DEFAULT = "INFO"
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
HEARTBEAT_INTERVAL_S_DEFAULT = 1.0
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

Target = tuple[str, int]


# --- argparse types ----------------------------------------------------------------------------


def log_level(text: str) -> str:
    """One of logging's level names (WARN and FATAL too, as logging takes them), in any case;
    returned upper-case."""
    if text.upper() not in logging.getLevelNamesMapping():
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(LOG_LEVELS)}, got {text!r}")
    return text.upper()


def heartbeat_targets(text: str) -> tuple[Target, ...]:
    """'hc-1:9500,hc-2:9500' -> (('hc-1', 9500), ('hc-2', 9500)); empty text -> ()."""
    try:
        return parse_host_ports(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


# --- the shared flags --------------------------------------------------------------------------


def add_heartbeat_flags(parser: argparse.ArgumentParser, *, targets: bool = True,
                        targets_help: str = "health checkers to send heartbeats to, "
                                             "HOST:PORT[,...]") -> None:
    """`--heartbeat-targets` (unless `targets` is False: a health checker beats to its peers)
    and `--heartbeat-interval-s`."""
    if targets:
        parser.add_argument("--heartbeat-targets", type=heartbeat_targets, default=(),
                            help=targets_help)
    parser.add_argument("--heartbeat-interval-s", type=positive_s,
                        default=HEARTBEAT_INTERVAL_S_DEFAULT,
                        help="seconds between two heartbeats (default "
                             f"{HEARTBEAT_INTERVAL_S_DEFAULT:g})")


def add_log_level_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-level", type=log_level, default=LOG_LEVEL_DEFAULT,
                        help=f"{', '.join(LOG_LEVELS)} (default {LOG_LEVEL_DEFAULT})")


def add_metrics_listen_flag(parser: argparse.ArgumentParser) -> None:
    """`--metrics-listen` and the `--healthz-stale-s` of the /healthz it serves too."""
    parser.add_argument("--metrics-listen", type=metrics_listen_arg, default=None,
                        help="HOST:PORT to serve Prometheus /metrics and /healthz on "
                             "(absent: off)")
    add_healthz_stale_flag(parser)


def add_healthz_stale_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(HEALTHZ_STALE_FLAG, type=positive_s, default=STALE_AFTER_S_DEFAULT,
                        help="/healthz answers 503 once the service's main loop has shown no "
                             f"progress for this many seconds (default {STALE_AFTER_S_DEFAULT:g})")


# --- start-up ----------------------------------------------------------------------------------


def configure_logging(level: str, fmt: str = LOG_FORMAT, datefmt: str | None = None) -> None:
    """Log to stderr (the container's log) at `level` (a `log_level` value)."""
    logging.basicConfig(level=level, format=fmt, datefmt=datefmt)


def handle_stop_signals(stop: Callable[[], None], log: logging.Logger | None = None) -> None:
    """SIGTERM and SIGINT call `stop()` (logged on `log` when given) instead of ending the
    process, so the service shuts down gracefully and exits 0."""

    def on_signal(signum, _frame) -> None:
        if log is not None:
            log.info("signal %d: stopping", signum)
        stop()

    for signum in STOP_SIGNALS:
        signal.signal(signum, on_signal)


def start_heartbeats(name: str, targets, interval_s: float, secret: bytes | None,
                     status: Callable[[], str] | None = None) -> HeartbeatSender | None:
    """The started heartbeat sender of a service named `name`; None without targets."""
    if not targets:
        return None
    return HeartbeatSender(name, targets=targets, interval_s=interval_s, secret=secret,
                           status=status).start()
