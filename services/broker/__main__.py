"""`python -m services.broker --node-id 1 --listen 127.0.0.1:9092 --data-dir DIR [...]`

Prints `kaska broker <id> listening on <host>:<port>` on stdout once it serves (port 0 picks a
free port; tests read the line), then, with `--kafka-listen`, `kafka listener of broker <id> on
<host>:<port>`. SIGTERM or SIGINT stop it gracefully, exit code 0.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from common.cluster_secret import SECRET_ENV, ClusterSecretError, load_secret
from common.essential_threads import exit_on_essential_thread_death
from common.heartbeat import HeartbeatSender
from common.metrics_http import MetricsBindError, MetricsEndpoint
from common.service_cli import (
    add_heartbeat_flags,
    add_log_level_flag,
    add_metrics_listen_flag,
    configure_logging,
    handle_stop_signals,
)
from services.broker.config import BrokerConfig, Peer
from services.broker.metrics import broker_registry
from services.broker.replication.identity import CLUSTER_ID_ENV, ClusterIdMismatchError
from services.broker.replication.node import ReplicationFsync
from services.broker.replication.placement import CorruptGroupsFileError, GroupCountMismatchError
from services.broker.server import BrokerServer, log_config

TOKEN_ENV = "KASKA_TOKEN"
# Threads whose death of an unexpected exception ends the process (common/essential_threads.py):
# the replication loop, both listeners' accept loops, retention and the storage reaper.
ESSENTIAL_THREADS = ("kaska-replication-", "kaska-accept", "kafka-accept", "kaska-retention",
                     "reaper-", "kaska-topic-mirror-", "kaska-leader-balancer")
SIGNAL_POLL_S = 0.2


def _default(name: str):
    return BrokerConfig.__dataclass_fields__[name].default


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    return host, int(port)


def _peers(text: str) -> tuple[Peer, ...]:
    try:
        return tuple(Peer.parse(item) for item in text.split(",") if item)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


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


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m services.broker",
                                     description="Kaska broker (one of a replicated cluster).")
    parser.add_argument("--node-id", type=int, required=True)
    parser.add_argument("--listen", type=_address, default=("127.0.0.1", 9092),
                        help="HOST:PORT to listen on (port 0: any free port)")
    parser.add_argument("--advertise", type=_address, default=None,
                        help="HOST:PORT clients are told to use (default: the listen address)")
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--peers", type=_peers, default=(),
                        help="the other brokers of the cluster, ID@HOST:PORT[,...] (absent: a "
                             "cluster of one)")
    parser.add_argument("--election-timeout-ms-min", type=int,
                        default=_default("election_timeout_ms_min"))
    parser.add_argument("--election-timeout-ms-max", type=int,
                        default=_default("election_timeout_ms_max"))
    parser.add_argument("--quorum-timeout-ms", type=int, default=_default("quorum_timeout_ms"))
    parser.add_argument("--token", default=os.environ.get(TOKEN_ENV),
                        help=f"shared token clients must present (default: ${TOKEN_ENV})")
    parser.add_argument("--secret-file", type=Path, default=None,
                        help="file holding the cluster's secret, which signs every frame between "
                             f"brokers and the heartbeats (default: ${SECRET_ENV}; never on the "
                             "command line)")
    parser.add_argument("--cluster-id", default=os.environ.get(CLUSTER_ID_ENV) or None,
                        help="the cluster's id, 1..32 characters of A-Z a-z 0-9 . _ - (default: "
                             f"${CLUSTER_ID_ENV}, else derived from the voter ids): carried in "
                             "every frame between brokers and kept in the data directory; a "
                             "frame or a data directory of another cluster is refused")
    parser.add_argument("--frame-bytes-max", type=int, default=_default("frame_bytes_max"))
    parser.add_argument("--connections-max", type=int, default=_default("connections_max"))
    parser.add_argument("--segment-bytes-max", type=int,
                        default=_default("segment_bytes_max"))
    parser.add_argument("--retention-bytes", type=int, default=None)
    parser.add_argument("--retention-ms", type=int, default=None)
    parser.add_argument("--retention-check-interval-ms", type=int,
                        default=_default("retention_check_interval_ms"))
    parser.add_argument("--flush-interval-ms", type=int, default=None)
    parser.add_argument("--replication-fsync", choices=[p.value for p in ReplicationFsync],
                        default=_default("replication_fsync").value,
                        help="when a broker counts a journal entry as held toward acks=all: "
                             "none = in the page cache (Kafka's default; survives a SIGKILL "
                             "and a minority of machines lost, not a power cut of every "
                             "broker at once), entry = after fsyncing the journal and the "
                             "data (Raft's, Redpanda's; survives that power cut too, costs "
                             "throughput; docs/replication.md)")
    parser.add_argument("--shutdown-handover-ms", type=int,
                        default=_default("shutdown_handover_ms"),
                        help="on SIGTERM, a leader first hands leadership to its best caught-up "
                             "voter, waiting at most this long (0: it does not)")
    parser.add_argument("--fetch-wait-ms-max", type=int, default=_default("fetch_wait_ms_max"),
                        help="longest a caught-up FETCH long-polls, whatever it asks for")
    parser.add_argument("--replica-fetch-bytes-max", type=int,
                        default=_default("replica_fetch_bytes_max"),
                        help="bytes a follower asks its leader for per fetch")
    parser.add_argument("--journal-entries-max", type=int,
                        default=_default("journal_entries_max"),
                        help="compact the replication journal (fold its applied prefix into "
                             "a snapshot) once it holds more entries than this")
    parser.add_argument("--journal-bytes-max", type=int, default=_default("journal_bytes_max"),
                        help="... or more bytes of entries than this")
    parser.add_argument("--replication-groups", type=int, default=None,
                        help="Raft groups the partitions are spread over, each with its own "
                             "leader (default: one per broker, so each broker leads one); "
                             "fixed for a data directory (docs/replication.md)")
    parser.add_argument("--preferred-leader-steady-ms", type=int,
                        default=_default("preferred_leader_steady_ms"),
                        help="with several replication groups, a leader hands its group to the "
                             "group's preferred broker once that one has kept up this long "
                             "(0: never; Kafka's auto.leader.rebalance)")
    parser.add_argument("--kafka-listen", type=_address, default=None,
                        help="HOST:PORT of the Kafka protocol listener (absent: none; port 0: "
                             "any free port); docs/kafka.md")
    parser.add_argument("--kafka-advertise", type=_address, default=None,
                        help="HOST:PORT Kafka clients are told to use (default: --kafka-listen)")
    parser.add_argument("--kafka-peers", type=_peers, default=(),
                        help="the other brokers' Kafka addresses, ID@HOST:PORT[,...] (Kafka "
                             "clients learn every broker from METADATA)")
    parser.add_argument("--name", default=None,
                        help="service name in heartbeats (default: broker-<node id>)")
    add_heartbeat_flags(parser)
    add_metrics_listen_flag(parser)
    add_log_level_flag(parser)
    return parser.parse_args(argv)


def config_from_args(args: argparse.Namespace, secret: bytes | None = None) -> BrokerConfig:
    host, port = args.listen
    advertised_host, advertised_port = args.advertise or (None, None)
    kafka_host, kafka_port = args.kafka_listen or (None, 0)
    kafka_advertised_host, kafka_advertised_port = args.kafka_advertise or (None, None)
    return BrokerConfig(
        node_id=args.node_id, data_dir=args.data_dir, host=host, port=port,
        advertised_host=advertised_host, advertised_port=advertised_port, peers=args.peers,
        token=args.token, cluster_secret=secret, frame_bytes_max=args.frame_bytes_max,
        control_body_bytes_max=min(_default("control_body_bytes_max"), args.frame_bytes_max),
        connections_max=args.connections_max, segment_bytes_max=args.segment_bytes_max,
        retention_bytes=args.retention_bytes, retention_ms=args.retention_ms,
        retention_check_interval_ms=args.retention_check_interval_ms,
        flush_interval_ms=args.flush_interval_ms, fetch_wait_ms_max=args.fetch_wait_ms_max,
        election_timeout_ms_min=args.election_timeout_ms_min,
        election_timeout_ms_max=args.election_timeout_ms_max,
        quorum_timeout_ms=args.quorum_timeout_ms,
        shutdown_handover_ms=args.shutdown_handover_ms,
        replica_fetch_bytes_max=args.replica_fetch_bytes_max,
        replication_fsync=args.replication_fsync, cluster_id=args.cluster_id,
        journal_entries_max=args.journal_entries_max, journal_bytes_max=args.journal_bytes_max,
        replication_groups=args.replication_groups,
        preferred_leader_steady_ms=args.preferred_leader_steady_ms, kafka_host=kafka_host,
        kafka_port=kafka_port,
        kafka_advertised_host=kafka_advertised_host,
        kafka_advertised_port=kafka_advertised_port, kafka_peers=args.kafka_peers)


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
        config = config_from_args(args, secret)
        log_config(config)  # the storage's own checks, before anything starts
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
                                                 lambda: broker_registry(server))
    except MetricsBindError as exc:
        server.stop()
        print(f"python -m services.broker: error: {exc}", file=sys.stderr)
        return 2
    host, port = server.address
    announce(f"kaska broker {args.node_id} listening on {host}:{port}")
    if server.kafka_address is not None:
        announce(f"kafka listener of broker {args.node_id} on {server.kafka_address[0]}:"
                 f"{server.kafka_address[1]}")
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
