"""A replication group's leader side: who leads, what is committed, the journal entries of
the leader's writes and the waits for their commit, and the topics it creates and deletes.

Handlers never decide leadership or visibility themselves: they ask a partition
(partition.py, found through partition_table.py), which asks its group's replica manager who
leads it (NOT_LEADER answers carry its address) and how far its journal is committed. A broker
has one ReplicaManager per replication group (replication_groups.py); topics are created and
deleted through the metadata group's (topic_admin.py). The group's topic mirror
(replication/topic_mirror.py) journals its opens and closes through `journal_create` and
`journal_delete`. A broker without peers is a cluster of one: the same code, committing at
once.

A partition's own writes (partition.py: append, DeleteRecords, the acks they wait for) call
back here for their journal entries and the waits on them.

Thread-safe: the replication state is an immutable snapshot read without a lock; appends take
the partition lock, then `_metadata_lock` (so a topic's last batches can never land in the
journal after its DELETE entry), then the journal's lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from common.kaska.errors import (
    InvalidPartitionsError,
    NotEnoughReplicasError,
    NotLeaderError,
    TopicAlreadyExistsError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from common.kaska.protocol.metadata import NO_LEADER, BrokerInfo
from common.kaska.record_batch import BatchHeader
from common.kaska.topic_name import is_internal
from services.broker.cluster.partition import Partition, PartitionRole
from services.broker.metrics import BrokerCounters
from services.broker.replication.committed_topics import CommittedTopics, LiveTopic
from services.broker.replication.journal_record import JournalEntry, TopicId, carrying, closing
from services.broker.replication.node import ReplicationNode
from services.broker.replication.raft import Role
from services.broker.replication.wire.replica_fetch import EntryKind
from services.broker.storage.log import PARTITIONS_MAX, Log
from services.broker.storage.partition import AppendResult

# A create that finds its name on disk waits for the journal's commit and tries again: once
# for a delete of that name that was not committed yet, once more for a concurrent re-create.
CREATE_ATTEMPTS_MAX = 3


class _IncarnationMovedError(Exception):
    """The incarnation a delete was decided for stopped being the live one before its entry
    was journaled (another delete or create came first): decide again."""




class ReplicaManager:
    def __init__(self, node: ReplicationNode, advertised: tuple[str, int], log: Log,
                 ack_timeout_s: float, counters: BrokerCounters | None = None,
                 topics: CommittedTopics | None = None) -> None:
        """`topics`: the group's committed topics view (a new one over its journal if None)."""
        self.node = node
        self._counters = counters or BrokerCounters()
        self._log = log
        self._ack_timeout_s = ack_timeout_s
        self._self = BrokerInfo(node.config.node_id, advertised[0], advertised[1])
        self._brokers = (self._self, *node.config.peers)
        self._metadata_lock = threading.Lock()
        self._deleting: set[str] = set()
        self._topics = topics if topics is not None else CommittedTopics(node.journal)

    # -- roles -------------------------------------------------------------------------------

    def brokers(self) -> tuple[BrokerInfo, ...]:
        return self._brokers

    def role(self, topic: str, partition: int, *, lease: bool = True) -> PartitionRole:
        """Who leads. `lease`: a leader without its lease (partitioned, or thawed before its
        loop thread noticed a successor) says it knows no leader, so that
        clients ask elsewhere; checked on the clock now, not at the last tick."""
        state = self.node.state
        leader = state.leader_id
        if leader is None:
            return PartitionRole(False, NO_LEADER, state.epoch, "")
        if leader == self._self.node_id:
            if lease and state.role is Role.LEADER and not self.node.holds_lease(state):
                return PartitionRole(False, NO_LEADER, state.epoch, "", lease_expired=True)
            return PartitionRole(state.role is Role.LEADER, leader, state.epoch,
                                 self._self.address)
        return PartitionRole(False, leader, state.epoch, self.node.peer_address(leader))

    def require_leader(self, topic: str, partition: int, *, lease: bool = True,
                       lease_wait_s: float = 0.0) -> PartitionRole:
        """The role of a partition this broker leads, NotLeaderError (retriable) otherwise.
        `lease=False` for writes that wait for their commit anyway (topics). `lease_wait_s`:
        how long a leader whose lease lapsed waits for it (`_await_lease`) before refusing."""
        role = self.role(topic, partition, lease=lease)
        if role.lease_expired and lease_wait_s > 0:
            role = self._await_lease(topic, partition, role.leader_epoch, lease_wait_s)
        if not role.is_leader:
            if role.lease_expired:
                self.lease_refused()
            raise self._not_leader(f"{topic}/{partition}", role)
        return role

    def _await_lease(self, topic: str, partition: int, epoch: int, timeout_s: float
                     ) -> PartitionRole:
        """Backpressure instead of a refusal: a leader whose followers' confirmations are
        late (a loaded machine: their fetch rounds outlast the lease) holds the write until a
        majority confirms again, it stops leading this epoch (a successor, a hand-over), or
        `timeout_s` passes; then the role as it is. Never longer than the timeout, so a leader
        that was really cut off still answers NOT_LEADER."""
        node = self.node
        node.counters.lease_waits += 1
        node.wait_changed(lambda: not self._leads(epoch) or node.holds_lease(), timeout_s)
        return self.role(topic, partition)

    def lease_refused(self) -> None:
        """Count one request answered NOT_LEADER (or a METADATA naming no leader) for lack
        of a lease: `kaska_leader_lease_refusals_total`."""
        self._counters.lease_refused()

    @staticmethod
    def _not_leader(what: str, role: PartitionRole) -> NotLeaderError:
        if role.lease_expired:
            error = NotLeaderError(f"{what}: this broker holds no leader lease (lease expired, or "
                                   f"handing leadership over; epoch "
                                   f"{role.leader_epoch}); ask the others")
        elif role.leader_id == NO_LEADER:
            error = NotLeaderError(f"{what}: no leader elected yet (epoch {role.leader_epoch})")
        else:
            error = NotLeaderError(f"{what} is led by node {role.leader_id}")
        error.leader = role.leader_address
        return error

    def committed_end(self, topic: str, partition: int) -> int:
        """The end of the partition's committed batches in the group's journal here (the high
        watermark, before the log end bounds it; retention stays below it)."""
        return self.node.high_watermark(topic, partition)

    @property
    def lease_wait_s(self) -> float:
        """How long a write to a leader whose lease lapsed waits for it (`_await_lease`)."""
        return self.node.config.lease_wait_s

    # -- partitions --------------------------------------------------------------------------

    def partition(self, topic: str, number: int) -> Partition:
        """A partition of this group's Log, bound to this manager (UnknownTopicOrPartitionError
        when the Log has none). Requests find theirs through partition_table.py, which checks
        the topic's incarnation first."""
        return Partition(topic, number, self._log.partition(topic, number), self)

    # -- the journal entries of a partition's writes (partition.py) --------------------------

    def journal_batch(self, epoch: int, topic: str, partition: int, header: BatchHeader,
                      base_offset: int) -> JournalEntry:
        """Journal a batch the leader is appending (called under the partition's lock, before
        the batch is visible); UnknownTopicOrPartitionError once the topic's delete is
        journaled, so its last batches never land in the journal after the DELETE entry."""
        with self._metadata_lock:
            if topic in self._deleting:
                raise UnknownTopicOrPartitionError(f"topic {topic!r} is being deleted")
            return self.node.journal.append(
                epoch, EntryKind.BATCH, topic=topic, partition=partition,
                base_offset=base_offset, record_count=header.record_count,
                batch_bytes=header.total_bytes)

    def appended(self, topic: str, total_bytes: int, result: AppendResult) -> None:
        """A leader's append is in its log: followers may fetch it; client bytes are counted."""
        self.node.leader_appended()
        if not result.duplicate and not is_internal(topic):
            self._counters.appended(total_bytes, result.record_count)

    def batch_entry(self, topic: str, partition: int, base_offset: int) -> JournalEntry | None:
        """The journal entry of the batch at `base_offset` (a retried batch's original, which
        its acknowledgement must name too); None when compaction folded it (only committed
        entries ever are); NotEnoughReplicasError (retriable) when the journal here has none."""
        entry = self.node.journal.find_batch(topic, partition, base_offset)
        if entry is None and self.node.journal.compacted_batch(topic, partition, base_offset):
            return None
        if entry is None:
            raise NotEnoughReplicasError(f"{topic}/{partition}: the batch at offset "
                                         f"{base_offset} has no journal entry here; retry")
        return entry

    def journal_delete_records(self, epoch: int, topic: str, partition: int, offset: int
                               ) -> JournalEntry:
        """Journal a DELETE_RECORDS moving the partition's log start to `offset`, at once;
        UnknownTopicOrPartitionError while the topic is being deleted."""
        with self._metadata_lock:
            if topic in self._deleting:
                raise UnknownTopicOrPartitionError(f"topic {topic!r} is being deleted")
            entry = self.node.journal.append(epoch, EntryKind.DELETE_RECORDS, topic=topic,
                                             partition=partition, base_offset=offset)
        self.node.leader_appended()
        return entry

    def await_applied(self, entry: JournalEntry) -> None:
        """Until the committed `entry` is applied here too (committed is published a moment
        before it is applied: same lock, same step), at most the ack timeout."""
        node = self.node
        node.wait_changed(lambda: node.applied > entry.index, self._ack_timeout_s)

    def await_entry(self, entry: JournalEntry, epoch: int, what: str) -> None:
        """Return once the committed prefix holds `entry` itself (its index AND epoch). A
        leader that stepped down stops waiting: unless its entry is already committed, the
        answer is NOT_LEADER (retriable; the idempotent retry finds its batch, or appends it
        anew), never a success inferred from offsets or indexes that another leader's entries
        may now cover (Raft §5.3, Kafka's leader epochs; docs/replication.md)."""
        node = self.node
        # Fsync policy `entry`: the leader's own copy counts toward the majority only once
        # synced (the first waiter of a group syncs for all; nothing with policy `none`).
        node.sync_appended(entry.index + 1)

        def settled() -> bool:
            return node.entry_committed(entry.index, entry.epoch) or not self._leads(epoch)

        node.wait_changed(settled, self._ack_timeout_s)
        if node.entry_committed(entry.index, entry.epoch):
            return
        if node.stopping:
            raise NotEnoughReplicasError(f"{what}: this broker is stopping before a majority "
                                         "held the entry; retry on the next leader")
        if not self._leads(epoch):
            raise self._not_leader(what, self.role(what, 0))
        raise NotEnoughReplicasError(f"{what}: journal entry {entry.index} not on a majority "
                                     f"of brokers within {self._ack_timeout_s:.0f} s")

    def _leads(self, epoch: int) -> bool:
        state = self.node.state
        return state.role is Role.LEADER and state.epoch == epoch

    # -- topics ------------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int) -> TopicId:
        """Journal the topic and return its incarnation once committed. A name this leader
        holds already is TopicAlreadyExistsError, told only once the entries that made it are
        committed (a create still in the uncommitted tail may be truncated away); a name whose
        delete is in that tail is created once the delete is committed."""
        for _ in range(CREATE_ATTEMPTS_MAX):
            try:
                entry, epoch = self.journal_create(name, partitions)
            except TopicAlreadyExistsError:
                epoch = self.require_leader(name, 0, lease=False).leader_epoch
                self._await_settled(epoch, name)
                if name in self.committed_topics():
                    raise
                continue  # its delete is committed now: the name is free
            self.await_entry(entry, epoch, name)
            return TopicId(entry.epoch, entry.index)
        raise TopicAlreadyExistsError(f"topic {name!r} is on disk here, and neither committed "
                                      "nor being deleted")

    def journal_create(self, name: str, partitions: int, opens: TopicId | None = None
                       ) -> tuple[JournalEntry, int]:
        """As leader, journal a CREATE_TOPIC and make the topic here, without waiting for the
        commit: (entry, leader epoch). `opens`: a data group's CREATE_TOPIC opens the
        metadata group's incarnation `opens` (replication/topic_mirror.py)."""
        if not 1 <= partitions <= PARTITIONS_MAX:
            raise InvalidPartitionsError(f"{partitions} partitions; 1..{PARTITIONS_MAX} allowed")
        role = self.require_leader(name, 0, lease=False)  # answered once committed
        with self._metadata_lock:
            if name in self._log.topics():
                raise TopicAlreadyExistsError(f"topic {name!r} already exists")
            entry = self.node.journal.append(
                role.leader_epoch, EntryKind.CREATE_TOPIC, topic=name, partitions=partitions,
                **(carrying(opens) if opens is not None else {}))
            self._log.create_topic(name, partitions)
        self.node.leader_appended()
        return entry, role.leader_epoch

    def delete_topic(self, name: str, forget_offsets: Callable[[str], None],
                     topic_id: TopicId | None = None) -> JournalEntry | None:
        """Tombstone the topic's committed offsets, then journal the delete; every broker
        removes the files once the delete is committed. `topic_id`: only that incarnation
        (a retried delete never removes a topic re-created meanwhile): already gone, the
        delete is done; another incarnation live, UnknownTopicIdError. An answer that rests
        on uncommitted entries (a create or delete in the tail) waits for their commit.
        Returns the committed DELETE_TOPIC entry (None: it was gone already)."""
        role = self.require_leader(name, 0, lease=False)  # answered once committed
        epoch = role.leader_epoch
        live = self._live_incarnation(name)
        if live is None or (topic_id is not None and live != topic_id):
            self._await_settled(epoch, name)
            if live is None and topic_id is not None:
                return None
            if live is None:
                raise UnknownTopicOrPartitionError(f"no topic {name!r}")
            raise UnknownTopicIdError(f"topic {name!r} is incarnation {live} now, not "
                                      f"{topic_id}: not deleted")
        forget_offsets(name)
        try:
            entry = self._journal_delete(name, epoch, expected=live)
        except _IncarnationMovedError:
            return self.delete_topic(name, forget_offsets, topic_id)  # decide afresh
        try:
            self.await_entry(entry, role.leader_epoch, name)
        finally:
            with self._metadata_lock:
                self._deleting.discard(name)
        return entry

    def journal_delete(self, name: str, metadata_end: int = 0) -> JournalEntry:
        """As leader, journal a DELETE_TOPIC without waiting for its commit (a data group's
        close of a deleted incarnation, decided on the metadata group's prefix below
        `metadata_end`: replication/topic_mirror.py). Produce requests for the topic are
        refused from now on, here."""
        role = self.require_leader(name, 0, lease=False)
        return self._journal_delete(name, role.leader_epoch, metadata_end)

    def _journal_delete(self, name: str, epoch: int, metadata_end: int = 0,
                        expected: TopicId | None = None) -> JournalEntry:
        """`expected`: journal it only while that incarnation is the live one (checked under
        the lock the appends take), else _IncarnationMovedError."""
        with self._metadata_lock:
            if expected is not None and self._live_incarnation(name) != expected:
                raise _IncarnationMovedError(name)
            self._deleting.add(name)
            try:
                entry = self.node.journal.append(epoch, EntryKind.DELETE_TOPIC, topic=name,
                                                 **closing(metadata_end))
            except BaseException:
                self._deleting.discard(name)
                raise
        self.node.leader_appended()
        return entry

    def committed_topics(self) -> dict[str, LiveTopic]:
        """The topics of this broker's committed prefix of the group's journal, each with its
        incarnation: possibly behind the leader's (a follower learns a commit on its next
        fetch), never holding a create that is not committed."""
        return self._topics.at(self.node.state.commit).topics

    def leader_committed_topics(self) -> dict[str, LiveTopic]:
        """The committed topics as the group's leader holding its lease has them: every create
        or delete committed before the call is in them (the lease holds only once the leader
        committed its epoch's first entry, so its commit index is the group's).
        NotLeaderError, naming the leader, on any other broker."""
        role = self.role("", 0)
        if not role.is_leader:
            if role.lease_expired:
                self.lease_refused()
            raise self._not_leader("the topic list (the metadata group's leader answers it)",
                                   role)
        return self.committed_topics()

    def _live_incarnation(self, name: str) -> TopicId | None:
        """The incarnation of `name` live after the whole journal, uncommitted tail included."""
        live = self._topics.pending(self.node.state.commit).topics.get(name)
        return None if live is None else live.topic_id

    def _await_settled(self, epoch: int, what: str) -> None:
        """Return once every entry in this leader's journal now is committed: an answer read
        from them (exists, already gone) is given only once no truncation can undo it, as
        KRaft's controller answers a write that appends nothing once the records it read are
        committed. NotLeaderError or NotEnoughReplicasError (both retriable) otherwise."""
        end = self.node.journal.end
        entry_epoch = self.node.journal.epoch_of(end - 1) if end else None
        if entry_epoch is not None:
            self.await_entry(JournalEntry(end - 1, entry_epoch, EntryKind.NOOP), epoch, what)

    def pending_deletes(self) -> list[str]:
        """The topics this leader journaled a delete of and still refuses produce for."""
        with self._metadata_lock:
            return sorted(self._deleting)

    def forget_delete(self, name: str) -> None:
        """The delete of `name` is over (committed, or its entry is gone)."""
        with self._metadata_lock:
            self._deleting.discard(name)
