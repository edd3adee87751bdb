"""`python -m healthchecker --node-id I --peers ID@HOST:PORT,... --listen HOST:PORT ...`

One health checker replica. `--peers` may list every replica, this one included (it is skipped),
so all replicas can share one command line. Heartbeats from the other replicas are expected on
`--heartbeat-peers`, by default the peers' election addresses (same host and port, over TCP).
SIGTERM or SIGINT stops it gracefully (it tells the other replicas it stops on purpose) and it
exits 0. Every value is checked: a bad one exits 2 with a message naming the flag.

Start deadlines: a (re)started service has `--start-deadline-s` (default 10) to send its first
heartbeat or answer its first probe, except the kinds named by `--start-deadline PATTERN=S`
(first match wins; built in: spark-*=60 and query-service*=60, for JVMs). `--restart-grace-s`
is the former fixed grace period; it is still accepted and now means the start deadline of the
default kind (as if given as `--start-deadline-s`, which wins when both are given).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from common import address
from common.address import parse_host_port
from common.cluster_secret import SECRET_ENV, ClusterSecretError, load_secret
from common.essential_threads import exit_on_essential_thread_death
from common.liveness import HealthCheck
from common.metrics_http import MetricsBindError, MetricsEndpoint
from common.service_cli import (
    add_heartbeat_flags,
    add_log_level_flag,
    add_metrics_listen_flag,
    configure_logging,
    handle_stop_signals,
    positive_s,
)
from healthchecker.bully import ElectionConfig
from healthchecker.errors import HealthCheckerConfigError
from healthchecker.local_registry import NAME_PATTERN
from healthchecker.metrics import healthchecker_registry
from healthchecker.monitor import parse_probe
from healthchecker.node import HealthCheckerNode, NodeConfig
from healthchecker.restarter import Restarter
from healthchecker.status import StatusBindError, StatusEndpoint
from healthchecker.supervision import DEFAULT_START_DEADLINES, SupervisionConfig

SECRET_BYTES_MAX = 4096
START_DEADLINE_S_DEFAULT = 10.0
# A slow process (a JVM on a loaded machine) may miss heartbeats for seconds; a frozen one is
# told apart by inspection and restarted after the heartbeat timeout (supervision package).
HUNG_TIMEOUT_S_DEFAULT = 20.0

# Milliseconds and the logger's name first: the checkers' logs are read side by side.
LOG_FORMAT = "%(asctime)s.%(msecs)03d %(name)s %(levelname)s %(message)s"

log = logging.getLogger("healthchecker")
SIGNAL_POLL_S = 0.2


def _address(text: str) -> tuple[str, int]:
    try:
        return parse_host_port(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


def parse_peers(text: str) -> dict[int, tuple[str, int]]:
    """'1@host:9001,2@host:9002' -> {1: ('host', 9001), 2: ('host', 9002)} (common/address.py's
    ID@HOST:PORT; the old ID=HOST:PORT is read with a deprecation warning)."""
    try:
        listed = address.parse_peers(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error
    peers: dict[int, tuple[str, int]] = {}
    for peer in listed:
        if peer.node_id in peers:
            raise argparse.ArgumentTypeError(f"peer {peer.node_id} is listed twice")
        peers[peer.node_id] = address.Address(peer.host, peer.port)
    if not peers:
        raise argparse.ArgumentTypeError("expected at least one ID@HOST:PORT")
    return peers


def count_at_least_1(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return int(text)


def node_id(text: str) -> int:
    if not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return int(text)


def non_negative_s(text: str) -> float:
    seconds = float(text)
    if not seconds >= 0 or seconds == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0: {text!r}")
    return seconds


def start_deadline(text: str) -> tuple[str, float]:
    """'spark-*=90' -> ('spark-*', 90.0)."""
    pattern, sep, seconds = text.partition("=")
    if not sep or not pattern.strip():
        raise argparse.ArgumentTypeError(f"expected PATTERN=SECONDS, got {text!r}")
    return pattern.strip(), positive_s(seconds)


def probe(text: str):
    try:
        return parse_probe(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


def service_name(text: str) -> str:
    if not NAME_PATTERN.match(text):
        raise argparse.ArgumentTypeError(
            f"expected 1..128 letters, digits, '.', '_' or '-' (a letter or digit first), "
            f"got {text!r}")
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m healthchecker", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = parser.add_argument
    add("--node-id", type=node_id, required=True)
    add("--name", type=service_name,
        help="service name in heartbeats and registries (default healthchecker-ID)")
    add("--peers", type=parse_peers, required=True, help="ID@HOST:PORT,... (election, UDP)")
    add("--listen", type=_address, required=True, help="HOST:PORT for election packets (UDP)")
    add("--heartbeat-listen", type=_address, help="HOST:PORT (TCP); default: --listen")
    add("--heartbeat-peers", type=parse_peers, help="ID@HOST:PORT,... (TCP); default: --peers")
    secret = parser.add_mutually_exclusive_group()
    secret.add_argument("--secret-file", type=Path,
                        help="file holding the cluster secret (election packets, heartbeats, "
                             f"status requests); default: ${SECRET_ENV}")
    secret.add_argument("--secret", help="the secret itself (visible in `ps`: prefer "
                                         f"--secret-file or ${SECRET_ENV})")
    add("--backend", choices=("docker", "process"), required=True)
    add("--registry", type=Path, help="local service registry directory (process backend)")
    add("--project", default=os.environ.get("COMPOSE_PROJECT_NAME"),
        help="deployment label value (docker backend); default $COMPOSE_PROJECT_NAME")
    add("--probe", type=probe, action="append", default=[],
        help="NAME=HOST:PORT (TCP connect) or NAME=http://HOST:PORT/PATH (HTTP GET answered)")
    add("--checkpoint-dir", help="where restart counts and back-off survive a restart")
    add("--healthcheck-interval-s", type=positive_s, default=1.0)
    add("--healthcheck-misses-max", type=count_at_least_1, default=3)
    add("--answer-timeout-s", type=positive_s, default=1.0)
    add("--coordinator-timeout-s", type=positive_s, default=2.0)
    add("--announce-interval-s", type=positive_s, default=2.0)
    add_heartbeat_flags(parser, targets=False)  # it beats to its peers (--heartbeat-peers)
    add("--heartbeat-timeout-s", type=positive_s, default=3.0,
        help="an up service silent this long is restarted (default 3)")
    add("--hung-timeout-s", type=non_negative_s, default=HUNG_TIMEOUT_S_DEFAULT,
        help="a silent service whose process runs (slow, not frozen) is restarted only once "
             f"silent this long (default {HUNG_TIMEOUT_S_DEFAULT:g}; 0: silent past the "
             "heartbeat timeout is dead, no inspection)")
    add("--start-deadline-s", type=positive_s,
        help=f"a (re)started service of the default kind that shows no sign of life this long "
             f"is restarted (default {START_DEADLINE_S_DEFAULT:g})")
    add("--start-deadline", type=start_deadline, action="append", default=[],
        metavar="PATTERN=S",
        help="start deadline of the services matching a shell pattern (first match wins; "
             "built in: " + ", ".join(f"{p}={s:g}" for p, s in DEFAULT_START_DEADLINES) + ")")
    add("--restart-grace-s", type=positive_s,
        help="deprecated: the start deadline of the default kind (see --start-deadline-s)")
    add("--backoff-base-s", type=positive_s, default=1.0)
    add("--backoff-max-s", type=positive_s, default=30.0)
    add("--stable-after-s", type=positive_s, default=10.0,
        help="a restart sooner than this after the previous one is a flap, and backs off "
             "(default 10)")
    add("--probe-interval-s", type=positive_s, default=1.0)
    add("--state-interval-s", type=positive_s, default=0.5,
        help="how often the supervision state is shared with the peers (default 0.5)")
    add("--supervise-interval-s", type=positive_s, default=0.1,
        help="the supervision's tick (default 0.1)")
    add_metrics_listen_flag(parser)
    add("--status-listen", type=_address,
        help="HOST:PORT to answer the status page's signed, read-only GET /status on "
             "(absent: off)")
    add_log_level_flag(parser)
    return parser


def read_secret(args: argparse.Namespace, parser: argparse.ArgumentParser) -> bytes:
    if args.secret is not None:
        secret = args.secret.encode("utf-8")
    else:
        try:
            secret = load_secret(args.secret_file)
        except ClusterSecretError as error:
            parser.error(str(error))
        if secret is None:
            parser.error(f"the cluster secret is required: --secret-file or ${SECRET_ENV}")
    if not 0 < len(secret) <= SECRET_BYTES_MAX:
        parser.error(f"the secret must hold 1..{SECRET_BYTES_MAX} bytes")
    return secret


def build_restarter(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Restarter:
    if args.backend == "process":
        if args.registry is None:
            parser.error("--backend process needs --registry DIR")
        from healthchecker.local_registry import LocalServiceRegistry
        from healthchecker.restarter_process import ProcessRestarter

        return ProcessRestarter(LocalServiceRegistry(args.registry))
    if not args.project:
        parser.error("--backend docker needs --project NAME (or $COMPOSE_PROJECT_NAME)")
    from healthchecker.restarter_docker import DockerRestarter

    return DockerRestarter(args.project)


def start_deadline_s(args: argparse.Namespace) -> float:
    """--start-deadline-s, else the deprecated --restart-grace-s, else the default."""
    if args.start_deadline_s is not None:
        return args.start_deadline_s
    if args.restart_grace_s is not None:
        return args.restart_grace_s
    return START_DEADLINE_S_DEFAULT


def build_config(args: argparse.Namespace, secret: bytes) -> NodeConfig:
    """Raises `HealthCheckerConfigError` for values that do not fit together."""
    name = args.name or f"healthchecker-{args.node_id}"
    peers = {i: a for i, a in args.peers.items() if i != args.node_id}
    heartbeat_peers = {i: a for i, a in (args.heartbeat_peers or args.peers).items()
                       if i != args.node_id}
    election = ElectionConfig(
        node_id=args.node_id,
        peer_ids=frozenset(peers),
        healthcheck_interval_s=args.healthcheck_interval_s,
        healthcheck_misses_max=args.healthcheck_misses_max,
        answer_timeout_s=args.answer_timeout_s,
        coordinator_timeout_s=args.coordinator_timeout_s,
        announce_interval_s=args.announce_interval_s,
    )
    supervision = SupervisionConfig(
        self_name=name,
        heartbeat_timeout_s=args.heartbeat_timeout_s,
        start_deadline_s=start_deadline_s(args),
        start_deadlines=(*args.start_deadline, *DEFAULT_START_DEADLINES),
        backoff_base_s=args.backoff_base_s,
        backoff_max_s=args.backoff_max_s,
        stable_after_s=args.stable_after_s,
        hung_timeout_s=args.hung_timeout_s or None,
    )
    return NodeConfig(
        node_id=args.node_id,
        name=name,
        listen=args.listen,
        peers=peers,
        heartbeat_listen=args.heartbeat_listen or args.listen,
        heartbeat_peers=sorted(heartbeat_peers.values()),
        secret=secret,
        election=election,
        supervision=supervision,
        heartbeat_interval_s=args.heartbeat_interval_s,
        probes=tuple(args.probe),
        probe_interval_s=args.probe_interval_s,
        supervise_interval_s=args.supervise_interval_s,
        state_interval_s=args.state_interval_s,
        checkpoint_dir=args.checkpoint_dir,
    )


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.log_level, fmt=LOG_FORMAT, datefmt="%H:%M:%S")
    secret = read_secret(args, parser)
    try:
        config = build_config(args, secret)
    except HealthCheckerConfigError as error:
        parser.error(f"{type(error).__name__}: {error}")
    if args.restart_grace_s is not None:
        used = "ignored: --start-deadline-s wins" if args.start_deadline_s is not None else (
            "used as --start-deadline-s")
        log.warning("--restart-grace-s is deprecated (%s)", used)
    try:
        node = HealthCheckerNode(config, build_restarter(args, parser))
    except HealthCheckerConfigError as error:
        parser.error(f"{type(error).__name__}: {error}")
    handle_stop_signals(node.request_stop)
    # A checker whose election, supervision, restarter or heartbeat server died of a bug would
    # answer its peers and restart nothing: exit instead, and be restarted by them.
    exit_on_essential_thread_death(("election", "supervision", "restarter", "heartbeat-server"),
                                   stopping=node.stop_requested)
    try:
        metrics = MetricsEndpoint.start_optional(
            args.metrics_listen, lambda: healthchecker_registry(node),
            HealthCheck.of(node.election_progress, node.supervision_progress,
                           stale_after_s=args.healthz_stale_s))
    except MetricsBindError as error:
        parser.error(f"{type(error).__name__}: {error}")
    status = None
    if args.status_listen is not None:
        try:
            status = StatusEndpoint.for_node(args.status_listen, secret, node).start()
        except StatusBindError as error:
            parser.error(f"{type(error).__name__}: {error}")
    node.start()
    # As the broker's main loop: a process-directed SIGTERM may land on another thread, and a
    # main thread blocked in a bare wait() would only run the handler when something woke it
    # (seen: `docker-compose down` SIGKILLing two checkers after 10 s). Polling wakes it.
    while not node.wait(SIGNAL_POLL_S):
        pass
    if status is not None:
        status.stop()
    if metrics is not None:
        metrics.stop()
    node.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
