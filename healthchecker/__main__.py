"""`python -m healthchecker --node-id I --peers ID=HOST:PORT,... --listen HOST:PORT ...`

One health checker replica. `--peers` may list every replica, this one included (it is skipped),
so all replicas can share one command line. Heartbeats from the other replicas are expected on
`--heartbeat-peers`, by default the peers' election addresses (same host and port, over TCP).
SIGTERM or SIGINT stops it gracefully (it tells the other replicas it stops on purpose) and it
exits 0.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path

from common.heartbeat import parse_target
from healthchecker.bully import ElectionConfig
from healthchecker.monitor import parse_probe
from healthchecker.node import HealthCheckerNode, NodeConfig
from healthchecker.restarter import Restarter
from healthchecker.supervisor import SupervisorConfig

SECRET_BYTES_MAX = 4096


def parse_peers(text: str) -> dict[int, tuple[str, int]]:
    """'1=host:9001,2=host:9002' -> {1: ('host', 9001), 2: ('host', 9002)}."""
    peers: dict[int, tuple[str, int]] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        node_id, sep, address = item.partition("=")
        if not sep or not node_id.strip().isdigit():
            raise argparse.ArgumentTypeError(f"expected ID=HOST:PORT, got {item!r}")
        peers[int(node_id)] = parse_target(address)
    return peers


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m healthchecker", description=__doc__)
    add = parser.add_argument
    add("--node-id", type=int, required=True)
    add("--name", help="service name in heartbeats and registries (default healthchecker-ID)")
    add("--peers", type=parse_peers, required=True, help="ID=HOST:PORT,... (election, UDP)")
    add("--listen", type=parse_target, required=True, help="HOST:PORT for election packets (UDP)")
    add("--heartbeat-listen", type=parse_target, help="HOST:PORT (TCP); default: --listen")
    add("--heartbeat-peers", type=parse_peers, help="ID=HOST:PORT,... (TCP); default: --peers")
    secret = parser.add_mutually_exclusive_group(required=True)
    secret.add_argument("--secret-file", type=Path)
    secret.add_argument("--secret")
    add("--backend", choices=("docker", "process"), required=True)
    add("--registry", type=Path, help="local service registry directory (process backend)")
    add("--project", default=os.environ.get("COMPOSE_PROJECT_NAME"),
        help="deployment label value (docker backend); default $COMPOSE_PROJECT_NAME")
    add("--probe", type=parse_probe, action="append", default=[], help="NAME=HOST:PORT (TCP)")
    add("--checkpoint-dir", help="where restart counts and back-off survive a restart")
    add("--healthcheck-interval-s", type=float, default=1.0)
    add("--healthcheck-misses-max", type=int, default=3)
    add("--answer-timeout-s", type=float, default=1.0)
    add("--coordinator-timeout-s", type=float, default=2.0)
    add("--announce-interval-s", type=float, default=2.0)
    add("--heartbeat-interval-s", type=float, default=1.0)
    add("--heartbeat-timeout-s", type=float, default=3.0)
    add("--restart-grace-s", type=float, default=5.0)
    add("--backoff-base-s", type=float, default=1.0)
    add("--backoff-max-s", type=float, default=30.0)
    add("--stable-after-s", type=float, default=30.0)
    add("--probe-interval-s", type=float, default=1.0)
    add("--log-level", default="INFO")
    return parser


def read_secret(args: argparse.Namespace, parser: argparse.ArgumentParser) -> bytes:
    if args.secret is not None:
        secret = args.secret.encode("utf-8")
    else:
        try:
            secret = args.secret_file.read_bytes().strip()
        except OSError as error:
            parser.error(f"cannot read --secret-file: {error}")
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


def build_config(args: argparse.Namespace, secret: bytes) -> NodeConfig:
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
    supervisor = SupervisorConfig(
        self_name=name,
        heartbeat_timeout_s=args.heartbeat_timeout_s,
        restart_grace_s=args.restart_grace_s,
        backoff_base_s=args.backoff_base_s,
        backoff_max_s=args.backoff_max_s,
        stable_after_s=args.stable_after_s,
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
        supervisor=supervisor,
        heartbeat_interval_s=args.heartbeat_interval_s,
        probes=tuple(args.probe),
        probe_interval_s=args.probe_interval_s,
        checkpoint_dir=args.checkpoint_dir,
    )


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s.%(msecs)03d %(name)s %(levelname)s %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )
    config = build_config(args, read_secret(args, parser))
    node = HealthCheckerNode(config, build_restarter(args, parser))
    signal.signal(signal.SIGTERM, lambda signum, frame: node.request_stop())
    signal.signal(signal.SIGINT, lambda signum, frame: node.request_stop())
    node.start()
    node.wait()
    node.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
