"""`python -m services.status --brokers H:P,... --checkers H:P,... [--listen 127.0.0.1:8000]`

The live status page of one deployment: every service up, starting or dead (with its last
heartbeat, restarts and last heal), the health-checker leader, the broker cluster (leader,
epoch, partitions, follower lag), each session's progress and a timeline of the last deaths,
restarts, heals and elections. `/` is the page (it reloads itself), `/api/status` the same data
as JSON.

Sources: `--checkers` are the health checkers' status endpoints (their `--status-listen`; the
requests are signed with the cluster secret: `--secret-file`, else $FLIGHTS_CLUSTER_SECRET, or
the older `--secret`/$FLIGHTS_ELECTION_SECRET), `--broker-metrics` the brokers' Prometheus
endpoints (default: each `--brokers` host on port 9100), and the `sessions` and
`results.<cid>` topics read through `--brokers` (read-only: no consumer group). With
`--heartbeat-targets` it heartbeats as `--name` (default `status`), signed with the same secret,
so the health checkers restart it like any service. SIGTERM or SIGINT: it says goodbye to the
checkers and exits 0.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

import uvicorn

from common.address import Address, parse_host_port
from common.cluster_secret import SECRET_ENV as CLUSTER_SECRET_ENV
from common.cluster_secret import ClusterSecretError, load_secret
from common.service_cli import (
    add_healthz_stale_flag,
    add_heartbeat_flags,
    add_log_level_flag,
    configure_logging,
    handle_stop_signals,
    start_heartbeats,
)
from services.status.app import create_app
from services.status.config import (
    REFRESH_INTERVAL_S_DEFAULT,
    REQUEST_TIMEOUT_S_DEFAULT,
    StatusConfig,
    StatusConfigError,
    parse_addresses,
    parse_link,
)
from services.status.poller import Poller

SERVICE_NAME = "status"
LISTEN_DEFAULT = "127.0.0.1:8000"
BROKER_METRICS_PORT_DEFAULT = 9100
SECRET_ENV = "FLIGHTS_ELECTION_SECRET"
TOKEN_ENV = "KASKA_TOKEN"
SECRET_BYTES_MAX = 4096

log = logging.getLogger("services.status")


def parse_listen(text: str) -> Address:
    return parse_host_port(text, port_min=1)


def _arg(parse):
    """A config parser as an argparse type: a bad value exits 2 naming the flag."""
    def convert(text: str):
        try:
            return parse(text)
        except ValueError as error:  # StatusConfigError, AddressError
            raise argparse.ArgumentTypeError(str(error)) from error
    return convert


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m services.status", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--brokers", required=True, help="Kaska bootstrap list HOST:PORT[,...]")
    add("--broker-metrics", type=_arg(parse_addresses),
        help="the brokers' /metrics HOST:PORT, in broker order (default: each --brokers host, "
             f"port {BROKER_METRICS_PORT_DEFAULT})")
    add("--checkers", type=_arg(parse_addresses), required=True,
        help="the health checkers' status endpoints HOST:PORT, in node-id order")
    add("--secret", default=os.environ.get(SECRET_ENV),
        help=f"the health checkers' secret (default ${SECRET_ENV})")
    add("--secret-file", type=Path, help="file holding the health checkers' secret")
    add("--token", default=os.environ.get(TOKEN_ENV), help=f"Kaska token (default ${TOKEN_ENV})")
    add("--listen", type=_arg(parse_listen), default=parse_listen(LISTEN_DEFAULT),
        help=f"HOST:PORT of the page (default {LISTEN_DEFAULT}; port 0: any free one)")
    add("--refresh-interval-s", type=float, default=REFRESH_INTERVAL_S_DEFAULT)
    add("--request-timeout-s", type=float, default=REQUEST_TIMEOUT_S_DEFAULT)
    add("--link", type=_arg(parse_link), action="append", default=[], metavar="NAME=URL",
        help="a link shown on the page (e.g. 'Spark master=http://127.0.0.1:8080/')")
    add("--name", default=SERVICE_NAME, help="heartbeat name (default status)")
    add_heartbeat_flags(parser, targets_help="health checkers' heartbeat HOST:PORT[,...]")
    add_healthz_stale_flag(parser)
    add_log_level_flag(parser)
    return parser


def read_secret(args: argparse.Namespace, parser: argparse.ArgumentParser) -> bytes:
    if args.secret_file is not None:
        try:
            secret = args.secret_file.read_bytes().strip()
        except OSError as error:
            parser.error(f"cannot read --secret-file: {error}")
    elif args.secret:
        secret = args.secret.encode()
    else:
        try:
            secret = load_secret(None)
        except ClusterSecretError as error:
            parser.error(str(error))
        if secret is None:
            parser.error(f"--secret-file, ${CLUSTER_SECRET_ENV}, --secret or ${SECRET_ENV} is "
                         "required")
    if not 0 < len(secret) <= SECRET_BYTES_MAX:
        parser.error(f"the secret must hold 1..{SECRET_BYTES_MAX} bytes")
    return secret


def build_config(args: argparse.Namespace, secret: bytes) -> StatusConfig:
    broker_metrics = args.broker_metrics or tuple(
        (host, BROKER_METRICS_PORT_DEFAULT) for host, _ in parse_addresses(args.brokers))
    return StatusConfig(
        brokers=args.brokers, broker_metrics=broker_metrics, checkers=args.checkers,
        secret=secret, token=args.token, refresh_interval_s=args.refresh_interval_s,
        request_timeout_s=args.request_timeout_s, links=tuple(args.link))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    try:
        config = build_config(args, read_secret(args, parser))
    except StatusConfigError as error:
        parser.error(f"{type(error).__name__}: {error}")
    # The checkers' secret is the cluster's: it signs the heartbeats too.
    heartbeat = start_heartbeats(args.name, args.heartbeat_targets, args.heartbeat_interval_s,
                                 config.secret)
    poller = Poller(config)
    host, port = args.listen
    server = uvicorn.Server(uvicorn.Config(
        create_app(lambda: poller.document, [poller.progress], args.healthz_stale_s),
        host=host, port=port, log_level="warning",
        access_log=False, timeout_graceful_shutdown=3))
    # uvicorn handles SIGTERM and SIGINT while it serves, then re-raises the signal to the
    # handler it found: with Python's default that ends the process by the signal (exit 143
    # where a clean stop is 0). Ours asks the server to stop, also before it serves.
    handle_stop_signals(lambda: setattr(server, "should_exit", True))
    poller.start()
    log.info("status page on http://%s:%d/ (JSON: /api/status)", host, port)
    try:
        server.run()
    finally:
        poller.stop()
        if heartbeat is not None:
            heartbeat.stop()
    log.info("status page stopped")
    return 0 if server.started else 1


if __name__ == "__main__":
    sys.exit(main())
