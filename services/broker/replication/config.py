"""The replication settings and counters: what a ReplicationNode is built with and what it counts.

It owns `ReplicationConfig` (every bound of replication, units last), the fsync policy
(`ReplicationFsync`), the address of a peer (`PeerAddress`), the name of the replication state's
directory inside a broker's data directory (`REPLICATION_DIR`) and `ReplicationCounters`.

Invariants: a ReplicationConfig is checked when it is made (a known fsync policy, a valid
cluster id, journal bounds that allow compaction; `raft_config` refuses peer ids that repeat or
name this node) and never changes afterwards (frozen).

Threads: the config is immutable and shared freely. The counters are plain integers that the
node increments from its loop thread and its request threads (under the node's `_lock` where the
count goes with a state change) and that metrics and logs read without a lock.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from common.kaska.protocol.metadata import BrokerInfo
from services.broker.replication import raft
from services.broker.replication.identity import check_cluster_id, derived_cluster_id

REPLICATION_DIR = "@replication"


# A peer is what METADATA calls a broker: node id, host, port (and "host:port").
PeerAddress = BrokerInfo


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
    """Every bound of replication, units last. Defaults suit three brokers on one LAN."""

    node_id: int
    peers: tuple[PeerAddress, ...] = ()
    group: int = 0  # the replication group this node replicates (replication/placement.py)
    election_timeout_min_s: float = 0.5  # as BrokerConfig's defaults
    election_timeout_max_s: float = 1.0
    quorum_timeout_s: float = 3.0
    lease_timeout_s: float | None = None  # None: raft.LEASE_FRACTION_DEFAULT of the minimum
    # A write that finds the lease lapsed waits this long for the followers' confirmations
    # (a busy machine's late ones) before NOT_LEADER: about the longest election timeout, by
    # when a leader that was really cut off has a successor (replica_manager.py).
    lease_wait_s: float = 1.0
    tick_interval_s: float = 0.05
    fetch_wait_ms: int = 200  # a caught-up follower's long-poll; also its heartbeat period
    fetch_bytes_max: int = 8 * 1024 * 1024
    fetch_entries_max: int = 4096
    request_timeout_s: float = 1.5  # one fetch round trip, long-poll included
    vote_timeout_s: float = 0.5
    commit_persist_interval_s: float = 0.2
    storage_full_pause_s: float = 1.0  # a round refused for lack of disk space: wait this long
    # A leader handing over gives up once its target has not fetched for this long (a live
    # target fetches at once: its long-poll is woken when the hand-over begins).
    transfer_silence_s: float = 0.5
    token: str | None = None
    fsync: ReplicationFsync = ReplicationFsync.NONE  # see ReplicationFsync
    cluster_id: str | None = None  # None: derived from the voter ids (identity.py)
    # Compaction: fold the applied prefix into the snapshot once the journal holds more
    # entries, or more bytes of records, than this (docs/replication.md "Compaction").
    journal_entries_max: int = 100_000
    journal_bytes_max: int = 16 * 1024 * 1024

    def __post_init__(self) -> None:
        object.__setattr__(self, "fsync", ReplicationFsync.parse(self.fsync))
        if self.cluster_id is not None:
            check_cluster_id(self.cluster_id)
        if self.journal_entries_max < 2 or self.journal_bytes_max < 1:
            raise raft.RaftConfigError("journal_entries_max must be >= 2 and journal_bytes_max "
                                       ">= 1")

    def resolved_cluster_id(self) -> str:
        if self.cluster_id is not None:
            return self.cluster_id
        return derived_cluster_id({self.node_id, *(peer.node_id for peer in self.peers)})

    def raft_config(self) -> raft.RaftConfig:
        voters = frozenset({self.node_id, *(peer.node_id for peer in self.peers)})
        if len(voters) != 1 + len(self.peers):
            raise raft.RaftConfigError("peer ids must be distinct and differ from --node-id")
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
