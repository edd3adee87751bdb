"""`python -m services.broker --node-id 1 --listen 127.0.0.1:9092 --data-dir DIR [...]`

Prints `kaska broker <id> listening on <host>:<port>` on stdout once it serves (port 0 picks a
free port; tests read the line), then one `kafka listener <NAME> of broker <id> on <host>:<port>`
per Kafka listener (`--kafka-listeners`; `--kafka-listen` is one named PLAINTEXT), in the
order given. SIGTERM or SIGINT stop it gracefully, exit code 0.

With `--metrics-listen`, `/healthz` on that port answers 200 while every replication loop goes
round (503 and why once one has not for `--healthz-stale-s`); `python -m common.probe` asks it,
or, without a metrics port, `python -m common.probe kaska HOST:PORT` asks the broker itself.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from common.cluster_secret import SECRET_ENV, ClusterSecretError, load_secret
from common.config_flags import add_flags, flag_values
from common.essential_threads import exit_on_essential_thread_death
from common.heartbeat import HeartbeatSender
from common.liveness import HealthCheck
from common.metrics_http import MetricsBindError, MetricsEndpoint
from common.service_cli import (
    add_heartbeat_flags,
    add_log_level_flag,
    add_metrics_listen_flag,
    configure_logging,
    handle_stop_signals,
)
from services.broker.config import (
    BrokerConfig,
    KafkaListenerConfig,
    NetworkConfig,
    PlacementConfig,
)
from services.broker.metrics import broker_registry
from services.broker.replication.config import ReplicationConfig
from services.broker.replication.identity import ClusterIdMismatchError
from services.broker.replication.placement import CorruptGroupsFileError, GroupCountMismatchError
from services.broker.server import BrokerServer
from services.broker.storage.config import LogConfig

# Threads whose death of an unexpected exception ends the process (common/essential_threads.py):
# the replication loop, every listener's accept loop, retention and the storage reaper.
ESSENTIAL_THREADS = ("kaska-replication-", "kaska-accept", "kafka-accept", "kaska-retention",
                     "reaper-", "kaska-topic-mirror-", "kaska-leader-balancer")
SIGNAL_POLL_S = 0.2


def companions_from_args(args: argparse.Namespace,
                         status: Callable[[], str] | None = None,
                         secret: bytes | None = None) -> list:
    """What runs beside the broker: today the heartbeat sender, when it has targets.
    `status()`: what the heartbeats report (the broker's, e.g. a full disk); `secret`: the
    cluster secret the heartbeats are signed with (HeartbeatConfigError without one)."""
    if not args.heartbeat_targets:
        return []
    name = args.name or f"broker-{args.node_id}"
    return [HeartbeatSender(name, targets=args.heartbeat_targets,
                            interval_s=args.heartbeat_interval_s, status=status, secret=secret)]


# Each sub-config's flags, under a heading of `--help`.
FLAG_GROUPS = (("identity and cluster", ReplicationConfig), ("Kaska listener", NetworkConfig),
               ("storage", LogConfig), ("data and lifecycle", BrokerConfig),
               ("replication groups", PlacementConfig), ("Kafka listeners", KafkaListenerConfig))


def broker_health(server: BrokerServer, stale_after_s: float) -> HealthCheck:
    """/healthz: every replication group's loop went round within `stale_after_s` (the loop
    that replicates, elects and applies: a broker whose loop hangs serves stale reads and no
    writes, though its sockets still accept)."""
    return HealthCheck(lambda: [node.liveness for _, node in server.groups.replication_nodes()],
                       stale_after_s)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m services.broker",
                                     description="Kaska broker (one of a replicated cluster).")
    for title, config_class in FLAG_GROUPS:
        add_flags(parser.add_argument_group(title), config_class)
    parser.add_argument("--secret-file", type=Path, default=None,
                        help="file holding the cluster's secret, which signs every frame between "
                             f"brokers and the heartbeats (default: ${SECRET_ENV}; never on the "
                             "command line)")
    parser.add_argument("--name", default=None,
                        help="service name in heartbeats (default: broker-<node id>)")
    add_heartbeat_flags(parser)
    add_metrics_listen_flag(parser)
    add_log_level_flag(parser)
    return parser.parse_args(argv)


def config_from_args(args: argparse.Namespace, secret: bytes | None = None) -> BrokerConfig:
    return BrokerConfig(
        replication=ReplicationConfig(**flag_values(ReplicationConfig, args)),
        network=NetworkConfig(**flag_values(NetworkConfig, args)),
        storage=LogConfig(**flag_values(LogConfig, args)),
        placement=PlacementConfig(**flag_values(PlacementConfig, args)),
        kafka=KafkaListenerConfig(**flag_values(KafkaListenerConfig, args)),
        cluster_secret=secret, **flag_values(BrokerConfig, args))


def announce(line: str, stream: TextIO | None = None) -> None:
    """`line` and its newline in one write: launchers read it from a log that the broker's
    threads write to as well, and under PYTHONUNBUFFERED a print() writes the text and the
    newline apart, so a log line could land between them and hide the line's end (seen once:
    "listening on 127.0.0.1:53767" + a replication log line + "\n", and the launcher waited
    30 s for a line it never recognised)."""
    stream = sys.stdout if stream is None else stream
    stream.write(line + "\n")
    stream.flush()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        secret = load_secret(args.secret_file)
        config = config_from_args(args, secret)  # every layer's checks, before anything starts
        # The server exists only below; heartbeats start after it (companions), so `server`
        # is bound by the time one asks -- and a beat before that reports nothing.
        server: BrokerServer | None = None
        companions = companions_from_args(
            args, status=lambda: server.status() if server is not None else "", secret=secret)
    except (ValueError, ClusterSecretError) as exc:
        print(f"python -m services.broker: error: {exc}", file=sys.stderr)
        return 2
    configure_logging(args.log_level)
    stop_requested = threading.Event()
    handle_stop_signals(stop_requested.set)
    # A bug that kills one of these leaves a zombie broker (heartbeats on, nothing replicated
    # or accepted): exit instead, and be restarted.
    exit_on_essential_thread_death(ESSENTIAL_THREADS, stopping=stop_requested.is_set)
    # Companions (heartbeats) start once the broker listens and stop first on shutdown, so a
    # SIGTERM says "stopping" to the health checkers before the port closes.
    try:
        server = BrokerServer(config, companions=companions).start()
    except (ClusterIdMismatchError, GroupCountMismatchError, CorruptGroupsFileError) as exc:
        # a data directory of another cluster, or written with another group count: exit 2
        print(f"python -m services.broker: error: {exc}", file=sys.stderr)
        return 2
    try:
        metrics = MetricsEndpoint.start_optional(args.metrics_listen,
                                                 lambda: broker_registry(server),
                                                 broker_health(server, args.healthz_stale_s))
    except MetricsBindError as exc:
        server.stop()
        print(f"python -m services.broker: error: {exc}", file=sys.stderr)
        return 2
    host, port = server.address
    announce(f"kaska broker {args.node_id} listening on {host}:{port}")
    for name, (host, port) in server.kafka_addresses.items():
        announce(f"kafka listener {name} of broker {args.node_id} on {host}:{port}")
    # Python runs signal handlers on the main thread only, when it next wakes: a bare wait()
    # can sleep through a SIGTERM that the kernel handed to one of the busy server threads.
    while not stop_requested.wait(SIGNAL_POLL_S):
        pass
    if metrics is not None:
        metrics.stop()
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
