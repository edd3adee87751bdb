"""What a replication node does to a data directory before its state machine exists
(`open_replication_state`): check the directory belongs to the configured cluster, open the
journal and the small stores beside it, give the directory an identity when it has none, journal
the data of a directory written before replication, and reconcile the partitions with the
journal at the commit index to start from (docs/replication.md, "Membership and
identity").

The order is a contract: the cluster id is checked before anything else is read
(`ClusterIdMismatchError`: the broker refuses to start); the identity is made, and old data
adopted, before the commit index is computed; `reconcile` runs last, on that commit index.

It owns two decisions:
- `first_identity`: a directory without an identity is a voter when it already holds replication
  state (written before identities existed: its votes are in `quorum.*`) or when the broker is a
  cluster of one; otherwise a learner, since an empty directory in a cluster may be a broker that
  lost its state (raft.py, "learners"). The identity is saved before it is returned.
- `adopt_unjournaled_data`: a single broker's directory from before replication gets a journal
  of what it holds, at epoch 0 (its topics' CREATE_TOPIC entries, then every partition's bytes
  as BATCH entries, with a SKIPPED entry for what retention removed before). Alone, the broker
  counts it committed; in a cluster it is only a candidate history, kept or truncated by the
  election.

Invariants: both run once, at construction, before `reconcile` and before the state machine
reads the journal; adoption appends to an empty journal only (the directory had no replication
state), so the entries' indexes start at 0.

Threads: the constructing thread only (the node's loop and request threads do not exist yet), so
no lock is taken.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from common.kaska.record_batch import iter_batches
from common.kaska.topic_name import OFFSETS_TOPIC
from services.broker.replication.config import REPLICATION_DIR, ReplicationConfig
from services.broker.replication.identity import (
    BrokerIdentity,
    ClusterIdMismatchError,
    IdentityStore,
)
from services.broker.replication.journal import Journal, JournalEntry
from services.broker.replication.quorum_store import (
    AppliedStore,
    CommitStore,
    QuorumState,
    QuorumStore,
)
from services.broker.replication.reconcile import reconcile
from services.broker.replication.wire.replica_fetch import EntryKind
from services.broker.storage.log import Log

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReplicationState:
    """A data directory's replication state, opened and reconciled (`open_replication_state`)."""

    directory: Path  # DATA/@replication
    identity_store: IdentityStore
    journal: Journal
    quorum_store: QuorumStore
    commit_store: CommitStore
    applied_store: AppliedStore
    quorum: QuorumState  # the persisted epoch and vote
    identity: BrokerIdentity
    applied: int  # the persisted applied index (AppliedStore)
    commit: int  # the commit index to start from, within the journal


def open_replication_state(config: ReplicationConfig, log_store: Log,
                           data_dir: Path) -> ReplicationState:
    """Open (making it when missing) the replication state of `data_dir` for `config`'s node."""
    has_peers = bool(config.peers)
    directory = Path(data_dir) / REPLICATION_DIR
    directory.mkdir(parents=True, exist_ok=True)
    upgrading = not any(directory.iterdir())
    identity_store = IdentityStore(directory)
    stored_identity = identity_store.load()
    cluster_id = config.resolved_cluster_id()
    if stored_identity is not None and stored_identity.cluster_id != cluster_id:
        raise ClusterIdMismatchError(stored_identity.cluster_id, cluster_id,
                                     identity_store.path)
    journal = Journal(directory, log_store.space)
    quorum_store = QuorumStore(directory)
    commit_store = CommitStore(directory)
    applied_store = AppliedStore(directory)
    quorum = quorum_store.load()
    identity = stored_identity or first_identity(
        config.node_id, identity_store, journal, cluster_id, quorum, upgrading, has_peers)
    if upgrading:
        adopt_unjournaled_data(config.node_id, journal, log_store, commit_store, has_peers)
    # Only committed entries are ever applied, so the persisted applied index is a commit
    # index too, and it may be the newer one (saved after each delete, the commit index
    # only now and then): reconcile must count those deletes as committed, since their
    # effects are not done again (ReplicationNode's _apply_commits_locked).
    applied = applied_store.load()
    # The snapshot's entries are committed and applied, whatever the stores say.
    commit = max(min(max(commit_store.load(), applied), journal.end), journal.start)
    reconcile(journal, log_store, commit)
    commit = min(commit, journal.end)
    return ReplicationState(directory, identity_store, journal, quorum_store, commit_store,
                            applied_store, quorum, identity, applied, commit)


def first_identity(node_id: int, store: IdentityStore, journal: Journal, cluster_id: str,
                   quorum: QuorumState, upgrading: bool, has_peers: bool) -> BrokerIdentity:
    """The identity of a directory that has none, saved (see the module docstring)."""
    has_state = quorum.epoch > 0 or (not upgrading and journal.end > 0)
    identity = BrokerIdentity.fresh(cluster_id, voter=has_state or not has_peers)
    store.save(identity)
    log.warning("broker %d: data directory of cluster %r made a new incarnation (%d) of "
                "this broker, %s", node_id, cluster_id, identity.incarnation,
                "a voter (it already held replication state, or it is a cluster of one)"
                if identity.voter else "a learner until it has caught up with the cluster "
                "(docs/replication.md, \"Membership and identity\")")
    return identity


def adopt_unjournaled_data(node_id: int, journal: Journal, log_store: Log,
                           commit_store: CommitStore, has_peers: bool) -> None:
    """A data directory from before replication (a single broker's): journal what it holds
    at epoch 0. Alone, the broker counts it committed (it acknowledged all of it); in a
    cluster it is only a candidate history, kept or truncated by the election."""
    topics = {name: count for name, count in log_store.topics().items()
              if name != OFFSETS_TOPIC}
    offsets = {OFFSETS_TOPIC: 1} if OFFSETS_TOPIC in log_store.topics() else {}
    if not topics and not offsets:
        return
    for name, count in sorted(topics.items()):
        _journal_adopted(journal, EntryKind.CREATE_TOPIC, topic=name, partitions=count)
    for name in sorted({**topics, **offsets}):
        for partition in log_store.held(name):
            _adopt_partition(journal, log_store, name, partition)
    if not has_peers:
        commit_store.save(journal.end)
    log.warning("broker %d: adopted %d topic(s) written before replication (journal of %d "
                "entries, all committed)", node_id, len(topics), journal.end)


def _adopt_partition(journal: Journal, log_store: Log, topic: str, partition: int) -> None:
    partition_log = log_store.partition(topic, partition)
    offset = partition_log.held_start_offset  # a directory from before DeleteRecords
    end = partition_log.log_end_offset
    if offset > 0:
        _journal_adopted(journal, EntryKind.SKIPPED, topic=topic, partition=partition,
                         base_offset=0, record_count=offset)
    while offset < end:
        chunk = partition_log.read_bytes(offset, 1 << 20, upto_offset=end, below_start=True)
        for header, _batch in iter_batches(chunk):
            _journal_adopted(journal, EntryKind.BATCH, topic=topic, partition=partition,
                             base_offset=header.base_offset,
                             record_count=header.record_count,
                             batch_bytes=header.total_bytes)
            offset = header.next_offset


def _journal_adopted(journal: Journal, kind: EntryKind, **fields) -> None:
    journal.append_replica(JournalEntry(journal.end, 0, kind, **fields))
