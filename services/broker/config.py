"""The broker's settings: frozen, checked dataclasses, one per layer, each field declared once.

BrokerConfig holds the data directory, the shutdown and retention timing and one sub-config per
layer, which that layer receives as is:
  network      NetworkConfig: the Kaska listener and its per-connection bounds
  storage      LogConfig (storage/config.py): segments, retention, flushing
  replication  ReplicationConfig (replication/config.py): node id, peers, token, cluster id,
               election and quorum timing, fsync policy, journal compaction
  placement    PlacementConfig: replication groups and the leader balancer
  kafka        KafkaListenerConfig (kafka/config.py): Kafka's named listeners beside Kaska's
The command-line flags of `python -m services.broker` are declared on these fields
(common/config_flags.py); `__main__` adds them and reads them back.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from common.address import Address, parse_host_port
from common.cluster_secret import SECRET_BYTES_MAX
from common.config_flags import setting
from common.kaska.protocol.frames import FRAME_BYTES_MAX_DEFAULT
from services.broker.kafka.config import KafkaListenerConfig
from services.broker.replication.config import PeerAddress, ReplicationConfig
from services.broker.replication.placement import check_groups
from services.broker.storage.config import LogConfig

MIB = 1024 * 1024
CONTROL_BODY_BYTES_MAX_DEFAULT = MIB


@dataclass(frozen=True, slots=True)
class NetworkConfig:
    """The Kaska listener: where it listens and what one connection may cost."""

    listen: Address = setting("--listen", "HOST:PORT to listen on (port 0: any free port; "
                              "read it back from BrokerServer.address)",
                              default=Address("127.0.0.1", 9092), parse=parse_host_port,
                              metavar="HOST:PORT")
    advertise: Address | None = setting(
        "--advertise", "HOST:PORT clients are told to use (default: the listen address)",
        default=None, parse=parse_host_port, metavar="HOST:PORT")
    frame_bytes_max: int = setting("--frame-bytes-max", "largest request frame accepted",
                                   default=FRAME_BYTES_MAX_DEFAULT)
    # Requests other than PRODUCE are read whole into memory; they are tiny, so a much smaller
    # bound than frame_bytes_max applies to them. None: 1 MiB, or frame_bytes_max if smaller.
    control_body_bytes_max: int | None = None
    connections_max: int = setting("--connections-max", "connections served at once (one "
                                   "thread each); more are closed at once", default=256)
    idle_timeout_s: float = 600.0  # no request for this long: the broker closes the connection
    read_timeout_s: float = 30.0  # a started frame must keep arriving; also bounds each send
    fetch_wait_ms_max: int = setting(
        "--fetch-wait-ms-max", "longest a caught-up FETCH long-polls, whatever it asks for",
        default=30_000)
    listen_backlog: int = 128

    def __post_init__(self) -> None:
        if self.control_body_bytes_max is None:
            object.__setattr__(self, "control_body_bytes_max",
                               min(CONTROL_BODY_BYTES_MAX_DEFAULT, self.frame_bytes_max))
        if self.frame_bytes_max < 1024:
            raise ValueError("frame_bytes_max below 1 KiB")
        if not 1024 <= self.control_body_bytes_max <= self.frame_bytes_max:
            raise ValueError("control_body_bytes_max must lie in [1 KiB, frame_bytes_max]")
        if self.connections_max < 1:
            raise ValueError("connections_max must be positive")
        if self.read_timeout_s <= 0 or self.idle_timeout_s <= 0:
            raise ValueError("read_timeout_s and idle_timeout_s must be positive")
        if self.fetch_wait_ms_max < 0:
            raise ValueError("fetch_wait_ms_max must be >= 0")


@dataclass(frozen=True, slots=True)
class PlacementConfig:
    """How the partitions are spread over Raft groups (replication/placement.py)."""

    # None: one group per broker, so every broker leads one. Fixed for a data directory.
    groups: int | None = setting(
        "--replication-groups", "Raft groups the partitions are spread over, each with its own "
        "leader (default: one per broker, so each broker leads one); fixed for a data "
        "directory (docs/replication.md)", default=None, parse=int)
    # With several groups (replication/leader_balance.py); 0: never.
    preferred_leader_steady_ms: int = setting(
        "--preferred-leader-steady-ms", "with several replication groups, a leader hands its "
        "group to the group's preferred broker once that one has kept up this long (0: never; "
        "Kafka's auto.leader.rebalance)", default=2000)

    def __post_init__(self) -> None:
        if self.groups is not None:
            check_groups(self.groups)  # InvalidGroupCountError, a ValueError
        if self.preferred_leader_steady_ms < 0:
            raise ValueError("preferred_leader_steady_ms must be >= 0 (0: no rebalancing)")


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    data_dir: Path = setting("--data-dir", "the broker's data directory", parse=Path,
                             required=True)
    replication: ReplicationConfig  # node id, peers, token, cluster id and Raft's bounds
    network: NetworkConfig = field(default_factory=NetworkConfig)
    storage: LogConfig = field(default_factory=LogConfig)
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    kafka: KafkaListenerConfig = field(default_factory=KafkaListenerConfig)
    # Signs and checks every frame between brokers (replication/wire/peer_auth.py); a broker
    # with peers needs it. Never in repr: configs get logged.
    cluster_secret: bytes | None = field(default=None, repr=False)
    # A produce waits at most this long for its acks.
    ack_timeout_s: float = 10.0
    shutdown_grace_s: float = 3.0
    # A leader stopped gracefully (SIGTERM) first hands leadership to its best caught-up voter
    # (Raft's leadership transfer, Kafka's controlled shutdown), waiting at most this long:
    # the cluster then elects at once instead of after an election timeout. 0: no hand-over.
    shutdown_handover_ms: int = setting(
        "--shutdown-handover-ms", "on SIGTERM, a leader first hands leadership to its best "
        "caught-up voter, waiting at most this long (0: it does not)", default=2000)
    retention_check_interval_ms: int = setting(
        "--retention-check-interval-ms", "how often segments past the retention bounds are "
        "deleted", default=60_000)

    def __post_init__(self) -> None:
        # A batch must fit one frame and one segment (after the segment's file header).
        if self.storage.batch_bytes_max > self.network.frame_bytes_max:
            object.__setattr__(self, "storage", replace(
                self.storage, batch_bytes_max=self.network.frame_bytes_max))
        if self.ack_timeout_s <= 0:
            raise ValueError("ack_timeout_s must be > 0")
        if self.retention_check_interval_ms <= 0:
            raise ValueError("retention_check_interval_ms must be > 0")
        if self.shutdown_handover_ms < 0:
            raise ValueError("shutdown_handover_ms must be >= 0 (0: no hand-over)")
        if self.peers and not self.cluster_secret:
            raise ValueError("a broker with --peers needs the cluster secret (--secret-file or "
                             "$FLIGHTS_CLUSTER_SECRET) to sign and check the frames between "
                             "brokers")
        if self.cluster_secret is not None and not 0 < len(self.cluster_secret) <= \
                SECRET_BYTES_MAX:
            raise ValueError(f"the cluster secret must hold 1..{SECRET_BYTES_MAX} bytes")
        self._check_kafka()

    @property
    def node_id(self) -> int:
        return self.replication.node_id

    @property
    def peers(self) -> tuple[PeerAddress, ...]:
        """The other brokers of the cluster (none: a cluster of one)."""
        return self.replication.peers

    @property
    def token(self) -> str | None:
        return self.replication.token

    @property
    def groups(self) -> int:
        """The replication group count: `placement.groups`, or one per broker."""
        if self.placement.groups is not None:
            return self.placement.groups
        return 1 + len(self.peers)

    def _check_kafka(self) -> None:
        if not self.kafka.enabled:
            return
        if self.token is not None:
            # The Kafka listener has no SASL yet: it would let anyone past the token.
            raise ValueError("a Kafka listener cannot be combined with --token (the Kafka "
                             "listener does not authenticate clients yet)")
        peer_ids = sorted(peer.node_id for peer in self.peers)
        # Every broker leads some time: Kafka clients on every listener must be told how to
        # reach each one.
        for spec in self.kafka.specs():
            kafka_ids = sorted(peer.node_id for peer in self.kafka.peers_on(spec.name))
            if kafka_ids != peer_ids:
                raise ValueError(
                    f"--kafka-peers must give every broker of --peers ({_ids(peer_ids)}) one "
                    f"address on listener {spec.name}, got {_ids(kafka_ids)}")


def _ids(node_ids: list[int]) -> str:
    return ", ".join(map(str, node_ids)) or "none"
