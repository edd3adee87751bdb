"""The replication settings and counters: what a ReplicationNode is built with and what it counts.

It owns `ReplicationConfig` (every bound of replication, units last; the broker's command-line
flags are declared on its fields, common/config_flags.py), the fsync policy
(`ReplicationFsync`), the address of a peer (`PeerAddress`), the name of the replication state's
directory inside a broker's data directory (`REPLICATION_DIR`) and `ReplicationCounters`.

Invariants: a ReplicationConfig is checked when it is made (node ids in range, peer ids that
neither repeat nor name this node, election and quorum timeouts in order, a known fsync policy,
a valid cluster id, journal bounds that allow compaction) and never changes afterwards (frozen).

Threads: the config is immutable and shared freely. The counters are plain integers that the
node increments from its loop thread and its request threads (under the node's `_lock` where the
count goes with a state change) and that metrics and logs read without a lock.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from common.address import parse_peers
from common.config_flags import setting
from common.kaska.protocol.metadata import BrokerInfo
from services.broker.replication import raft
from services.broker.replication.identity import (
    CLUSTER_ID_ENV,
    check_cluster_id,
    derived_cluster_id,
)
from services.broker.replication.wire.replication_bounds import NODE_ID_MAX

REPLICATION_DIR = "@replication"
TOKEN_ENV = "KASKA_TOKEN"
MIB = 1024 * 1024


# A peer is what METADATA calls a broker: node id, host, port (and "host:port").
PeerAddress = BrokerInfo


def parse_peer_addresses(text: str) -> tuple[PeerAddress, ...]:
    """'2@host:9092,3@host:9093' -> the PeerAddresses (common/address.py's syntax)."""
    return tuple(PeerAddress(*peer) for peer in parse_peers(text))


class ReplicationFsyncError(ValueError):
    """A replication fsync policy that is not one of ReplicationFsync's values."""


class ReplicationFsync(Enum):
    """When a broker counts a journal entry as held (docs/replication.md, "Durability").

    NONE   in the page cache is enough (Kafka: durability through replication). Survives a
           SIGKILL of any broker and the loss of any minority of machines; a power cut of
           every broker at once loses what the page caches held.
    ENTRY  fsynced first, journal entry and partition bytes (Raft, Redpanda): a follower
           before the fetch that acknowledges them, a leader before its copy counts. An
           acknowledged (acks=all) batch also survives a power cut of every broker at once.
    """

    NONE = "none"
    ENTRY = "entry"

    @classmethod
    def parse(cls, value: ReplicationFsync | str) -> ReplicationFsync:
        if isinstance(value, cls):
            return value
        try:
            return cls(value)
        except ValueError:
            raise ReplicationFsyncError(
                f"replication fsync policy {value!r} is not one of "
                f"{', '.join(policy.value for policy in cls)}") from None


@dataclass(frozen=True, slots=True)
class ReplicationConfig:
    """Every bound of replication, units last. Defaults suit three brokers on one LAN.

    Election and quorum (docs/replication.md): a follower that hears nothing from the leader
    for a random time in [election_timeout_min_s, election_timeout_max_s] starts an election;
    a leader not fetched from by a majority for quorum_timeout_s steps down. 0.5-1 s (etcd's
    default is 1 s over 100 ms heartbeats; ours, the follower's long-poll, are 200 ms): a
    killed leader's partitions take writes again within ~0.85 s (median, docs/benchmarks.md);
    1-2 s cost ~1.3-1.9 s.
    """

    node_id: int = setting("--node-id", "this broker's id, unique in its cluster "
                           f"(0..{NODE_ID_MAX})", parse=int, required=True)
    peers: tuple[PeerAddress, ...] = setting(
        "--peers", "the other brokers of the cluster, ID@HOST:PORT[,...] (absent: a cluster of "
        "one)", default=(), parse=parse_peer_addresses, metavar="ID@HOST:PORT,...")
    group: int = 0  # the replication group this node replicates (replication/placement.py)
    election_timeout_min_s: float = setting(
        "--election-timeout-ms-min", "shortest silence from the leader, in ms, after which a "
        "follower starts an election", default=0.5, parse=int, flag_per_field=1000)
    election_timeout_max_s: float = setting(
        "--election-timeout-ms-max", "longest such silence, in ms (each follower draws its "
        "timeout between the two)", default=1.0, parse=int, flag_per_field=1000)
    quorum_timeout_s: float = setting(
        "--quorum-timeout-ms", "a leader not fetched from by a majority for this many ms steps "
        "down (>= --election-timeout-ms-min)", default=3.0, parse=int, flag_per_field=1000)
    lease_timeout_s: float | None = None  # None: raft.LEASE_FRACTION_DEFAULT of the minimum
    # A write that finds the lease lapsed waits this long for the followers' confirmations
    # (a busy machine's late ones) before NOT_LEADER: about the longest election timeout, by
    # when a leader that was really cut off has a successor (replica_manager.py).
    lease_wait_s: float = 1.0
    tick_interval_s: float = 0.05
    fetch_wait_ms: int = 200  # a caught-up follower's long-poll; also its heartbeat period
    # What a follower asks for per fetch (Kafka's replica.fetch.max.bytes): bounds the answer a
    # leader builds and a follower applies in one round trip.
    fetch_bytes_max: int = setting(
        "--replica-fetch-bytes-max", "bytes a follower asks its leader for per fetch",
        default=8 * MIB)
    fetch_entries_max: int = 4096
    request_timeout_s: float = 1.5  # one fetch round trip, long-poll included
    vote_timeout_s: float = 0.5
    commit_persist_interval_s: float = 0.2
    storage_full_pause_s: float = 1.0  # a round refused for lack of disk space: wait this long
    # A leader handing over gives up once its target has not fetched for this long (a live
    # target fetches at once: its long-poll is woken when the hand-over begins).
    transfer_silence_s: float = 0.5
    # Clients present it to the broker, and brokers to each other's Kaska listener.
    token: str | None = setting("--token", "shared token clients must present",
                                default=None, parse=str, env=TOKEN_ENV)
    fsync: ReplicationFsync = setting(
        "--replication-fsync", "when a broker counts a journal entry as held toward acks=all: "
        "none = in the page cache (Kafka's default; survives a SIGKILL and a minority of "
        "machines lost, not a power cut of every broker at once), entry = after fsyncing the "
        "journal and the data (Raft's, Redpanda's; survives that power cut too, costs "
        "throughput; docs/replication.md)", default=ReplicationFsync.NONE, parse=str,
        choices=tuple(policy.value for policy in ReplicationFsync))
    # Carried in every frame between brokers and kept in the data directory
    # (docs/replication.md, "Membership and identity"); None: derived from the voter ids.
    cluster_id: str | None = setting(
        "--cluster-id", "the cluster's id, 1..32 characters of A-Z a-z 0-9 . _ - (else "
        "derived from the voter ids): carried in every frame between brokers and kept in the "
        "data directory; a frame or a data directory of another cluster is refused",
        default=None, parse=str, env=CLUSTER_ID_ENV)
    # Compaction: fold the applied prefix into the snapshot once the journal holds more
    # entries, or more bytes of records, than this (docs/replication.md "Compaction").
    journal_entries_max: int = setting(
        "--journal-entries-max", "compact the replication journal (fold its applied prefix "
        "into a snapshot) once it holds more entries than this", default=100_000)
    journal_bytes_max: int = setting(
        "--journal-bytes-max", "... or more bytes of entries than this", default=16 * MIB)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fsync", ReplicationFsync.parse(self.fsync))
        if self.cluster_id is not None:
            check_cluster_id(self.cluster_id)
        ids = [peer.node_id for peer in self.peers]
        if self.node_id in ids or len(set(ids)) != len(ids):
            raise raft.RaftConfigError("--peers must name other brokers, each once (not "
                                       "--node-id)")
        if not all(0 <= node_id <= NODE_ID_MAX for node_id in (self.node_id, *ids)):
            raise raft.RaftConfigError(f"node ids must lie in 0..{NODE_ID_MAX}")
        if not 0 < self.election_timeout_min_s <= self.election_timeout_max_s:
            raise raft.RaftConfigError("need 0 < election_timeout_min_s <= "
                                       "election_timeout_max_s")
        if self.quorum_timeout_s < self.election_timeout_min_s:
            raise raft.RaftConfigError("quorum_timeout_s must be >= election_timeout_min_s")
        if self.fetch_bytes_max < 1024:
            raise raft.RaftConfigError("fetch_bytes_max (--replica-fetch-bytes-max) below "
                                       "1 KiB")
        if self.journal_entries_max < 2 or self.journal_bytes_max < 1:
            raise raft.RaftConfigError("journal_entries_max must be >= 2 and journal_bytes_max "
                                       ">= 1")

    def resolved_cluster_id(self) -> str:
        if self.cluster_id is not None:
            return self.cluster_id
        return derived_cluster_id({self.node_id, *(peer.node_id for peer in self.peers)})

    def raft_config(self) -> raft.RaftConfig:
        voters = frozenset({self.node_id, *(peer.node_id for peer in self.peers)})
        return raft.RaftConfig(self.node_id, voters, self.election_timeout_min_s,
                               self.election_timeout_max_s, self.quorum_timeout_s,
                               self.lease_timeout_s)


@dataclass
class ReplicationCounters:
    """Counted refusals and events, for logs and (later) metrics."""

    unknown_replica_requests: int = 0
    stale_epoch_requests: int = 0
    elections_won: int = 0
    truncations: int = 0
    entries_applied: int = 0
    stale_divergences: int = 0  # DIVERGING answers below the commit index (nothing truncated)
    peer_incarnation_changes: int = 0  # a follower came back with another data directory
    compactions: int = 0  # journal prefixes folded into the snapshot
    snapshots_installed: int = 0  # leader snapshots installed by this follower
    transfers_handed_over: int = 0  # TIMEOUT_NOW sent: this leader handed over and stepped down
    transfers_abandoned: int = 0  # hand-overs that found no caught-up voter in time
    transfer_candidacies: int = 0  # elections this broker stood in on a TIMEOUT_NOW
    lease_waits: int = 0  # writes that found the lease lapsed and waited for it
    followers_stalled: int = 0  # episodes of a follower stuck behind this leader (reported once)
    records_deleted: int = 0  # offsets committed DELETE_RECORDS moved below the log starts here
