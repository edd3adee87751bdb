"""The broker's settings: one frozen dataclass, built by `__main__` from flags or by tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from common.cluster_secret import SECRET_BYTES_MAX
from common.kaska.protocol.frames import FRAME_BYTES_MAX_DEFAULT
from services.broker.replication.identity import check_cluster_id
from services.broker.replication.node import ReplicationFsync
from services.broker.replication.placement import check_groups
from services.broker.replication.wire.replication_bounds import NODE_ID_MAX

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Peer:
    node_id: int
    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Peer:
        """`ID@HOST:PORT`."""
        node, _, address = text.partition("@")
        host, _, port = address.rpartition(":")
        if not node or not host or not port:
            raise ValueError(f"peer {text!r} is not ID@HOST:PORT")
        return cls(int(node), host, int(port))


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    node_id: int
    data_dir: Path
    host: str = "127.0.0.1"
    port: int = 9092  # 0: any free port (read it back from BrokerServer.address)
    advertised_host: str | None = None  # what METADATA tells clients; default: host
    advertised_port: int | None = None
    peers: tuple[Peer, ...] = ()  # the other brokers of the cluster (none: a cluster of one)
    token: str | None = None
    # Signs and checks every frame between brokers (replication/wire/peer_auth.py); a
    # broker with peers needs it. Never in repr: configs get logged.
    cluster_secret: bytes | None = field(default=None, repr=False)
    frame_bytes_max: int = FRAME_BYTES_MAX_DEFAULT
    # Requests other than PRODUCE are read whole into memory; they are tiny, so a much smaller
    # bound than frame_bytes_max applies to them.
    control_body_bytes_max: int = MIB
    connections_max: int = 256
    idle_timeout_s: float = 600.0  # no request for this long: the broker closes the connection
    read_timeout_s: float = 30.0  # a started frame must keep arriving; also bounds each send
    fetch_wait_ms_max: int = 30_000
    shutdown_grace_s: float = 3.0
    # A leader stopped gracefully (SIGTERM) first hands leadership to its best caught-up voter
    # (Raft's leadership transfer, Kafka's controlled shutdown), waiting at most this long:
    # the cluster then elects at once instead of after an election timeout. 0: no hand-over.
    shutdown_handover_ms: int = 2000
    retention_check_interval_ms: int = 60_000
    listen_backlog: int = 128
    segment_bytes_max: int = 64 * MIB
    index_interval_bytes: int = 4096
    retention_bytes: int | None = None
    retention_ms: int | None = None
    flush_interval_ms: int | None = None
    # Replication (docs/replication.md): a follower that hears nothing from the leader for a
    # random time in [min, max] starts an election; a leader not fetched from by a majority
    # for quorum_timeout_ms steps down; a produce waits at most ack_timeout_s for its acks.
    # 0.5-1 s (etcd's default is 1 s over 100 ms heartbeats; ours, the follower's long-poll,
    # are 200 ms): a killed leader's partitions take writes again within ~0.85 s (median,
    # docs/benchmarks.md); 1-2 s cost ~1.3-1.9 s.
    election_timeout_ms_min: int = 500
    election_timeout_ms_max: int = 1000
    quorum_timeout_ms: int = 3000
    ack_timeout_s: float = 10.0
    # What a follower asks for per fetch (Kafka's replica.fetch.max.bytes): bounds the answer a
    # leader builds and a follower applies in one round trip.
    replica_fetch_bytes_max: int = 8 * MIB
    # When a broker counts a journal entry as held, toward acks=all (docs/replication.md,
    # "Durability"): "none" (default, Kafka's) once in the page cache; "entry" (Raft's,
    # Redpanda's) once the journal and the partition bytes are fsynced. A string is parsed;
    # anything else raises ReplicationFsyncError naming the allowed values.
    replication_fsync: ReplicationFsync = ReplicationFsync.NONE
    # Carried in every frame between brokers and kept in the data directory
    # (docs/replication.md, "Membership and identity"); None: derived from the voter ids.
    cluster_id: str | None = None
    # Journal compaction (docs/replication.md "Compaction"): the applied prefix is folded into
    # a snapshot once the journal holds more entries, or bytes of records, than this.
    journal_entries_max: int = 100_000
    journal_bytes_max: int = 16 * MIB
    # Raft groups the partitions are spread over, each with its own leader
    # (replication/placement.py; docs/replication.md "Leadership spread over the brokers");
    # None: one per broker, so every broker leads one group. Fixed for a data directory.
    replication_groups: int | None = None
    # With several groups, a leader hands its group to the group's preferred leader once that
    # broker has kept up for this long (replication/leader_balance.py); 0: never.
    preferred_leader_steady_ms: int = 2000
    # Kafka's wire protocol beside Kaska's (services/broker/kafka/, docs/kafka.md): None, no
    # Kafka listener; port 0 any free port. METADATA names every broker by its Kafka address:
    # this one's (advertised, default the listen address) and `kafka_peers`' (the other brokers'
    # Kafka addresses, by the node ids of `peers`).
    kafka_host: str | None = None
    kafka_port: int = 0
    kafka_advertised_host: str | None = None
    kafka_advertised_port: int | None = None
    kafka_peers: tuple[Peer, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "replication_fsync",
                           ReplicationFsync.parse(self.replication_fsync))
        if self.cluster_id is not None:
            check_cluster_id(self.cluster_id)  # ClusterIdError, a ValueError
        if self.frame_bytes_max < 1024:
            raise ValueError("frame_bytes_max below 1 KiB")
        if not 1024 <= self.control_body_bytes_max <= self.frame_bytes_max:
            raise ValueError("control_body_bytes_max must lie in [1 KiB, frame_bytes_max]")
        if self.connections_max < 1:
            raise ValueError("connections_max must be positive")
        if self.read_timeout_s <= 0 or self.idle_timeout_s <= 0:
            raise ValueError("read_timeout_s and idle_timeout_s must be positive")
        if self.fetch_wait_ms_max < 0 or self.retention_check_interval_ms <= 0:
            raise ValueError("fetch_wait_ms_max must be >= 0, retention_check_interval_ms > 0")
        if not 0 < self.election_timeout_ms_min <= self.election_timeout_ms_max:
            raise ValueError("need 0 < election_timeout_ms_min <= election_timeout_ms_max")
        if self.quorum_timeout_ms < self.election_timeout_ms_min or self.ack_timeout_s <= 0:
            raise ValueError("quorum_timeout_ms must be >= election_timeout_ms_min and "
                             "ack_timeout_s > 0")
        if self.shutdown_handover_ms < 0:
            raise ValueError("shutdown_handover_ms must be >= 0 (0: no hand-over)")
        if self.replica_fetch_bytes_max < 1024:
            raise ValueError("replica_fetch_bytes_max below 1 KiB")
        if self.journal_entries_max < 2 or self.journal_bytes_max < 1:
            raise ValueError("journal_entries_max must be >= 2, journal_bytes_max >= 1")
        if self.replication_groups is not None:
            check_groups(self.replication_groups)  # InvalidGroupCountError, a ValueError
        if self.preferred_leader_steady_ms < 0:
            raise ValueError("preferred_leader_steady_ms must be >= 0 (0: no rebalancing)")
        ids = [peer.node_id for peer in self.peers]
        if self.node_id in ids or len(set(ids)) != len(ids):
            raise ValueError("--peers must name other brokers, each once (not --node-id)")
        if not all(0 <= node_id <= NODE_ID_MAX for node_id in (self.node_id, *ids)):
            raise ValueError(f"node ids must lie in 0..{NODE_ID_MAX}")
        if self.peers and not self.cluster_secret:
            raise ValueError("a broker with --peers needs the cluster secret (--secret-file or "
                             "$FLIGHTS_CLUSTER_SECRET) to sign and check the frames between "
                             "brokers")
        self._check_kafka()
        if self.cluster_secret is not None and not 0 < len(self.cluster_secret) <= \
                SECRET_BYTES_MAX:
            raise ValueError(f"the cluster secret must hold 1..{SECRET_BYTES_MAX} bytes")

    @property
    def groups(self) -> int:
        """The replication group count: `replication_groups`, or one per broker."""
        if self.replication_groups is not None:
            return self.replication_groups
        return 1 + len(self.peers)

    def _check_kafka(self) -> None:
        if self.kafka_host is None:
            if self.kafka_peers:
                raise ValueError("--kafka-peers needs --kafka-listen")
            return
        if self.token is not None:
            # The Kafka listener has no SASL yet: it would let anyone past the token.
            raise ValueError("--kafka-listen cannot be combined with --token (the Kafka "
                             "listener does not authenticate clients yet)")
        peer_ids = {peer.node_id for peer in self.peers}
        kafka_ids = [peer.node_id for peer in self.kafka_peers]
        # Every broker leads some time: Kafka clients must be told how to reach each one.
        if len(set(kafka_ids)) != len(kafka_ids) or set(kafka_ids) != peer_ids:
            raise ValueError("--kafka-peers must give the Kafka address of every broker of "
                             "--peers, each once")
