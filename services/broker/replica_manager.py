"""The seam between request handling and replication, for one replication group: who leads,
what consumers may see, and how the leader appends (data, then its journal entry, then waiting
for the acks asked for).

Handlers never decide leadership or visibility themselves: they ask the replica manager who
leads a partition (NOT_LEADER answers carry its address), which offset is the high watermark
and to append. A broker has one ReplicaManager per replication group; groups.py routes each
partition to its group's (GroupedReplicas), so the handlers see one. The group's topic mirror
(replication/topic_mirror.py) journals its opens and closes through `journal_create` and
`journal_delete`. A broker without peers is a cluster of one: the same code, committing at
once.

Thread-safe: the replication state is an immutable snapshot read without a lock; appends take
the partition lock, then `_metadata_lock` (so a topic's last batches can never land in the
journal after its DELETE entry), then the journal's lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from common.kaska.errors import (
    InvalidPartitionsError,
    NotEnoughReplicasError,
    NotLeaderError,
    OffsetOutOfRangeError,
    TopicAlreadyExistsError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from common.kaska.protocol.delete_records import HIGH_WATERMARK
from common.kaska.protocol.metadata import NO_LEADER, BrokerInfo
from common.kaska.protocol.produce import ACKS_ALL
from common.kaska.topic_name import OFFSETS_TOPIC, is_internal
from services.broker.metrics import BrokerCounters
from services.broker.offsets import OFFSETS_PARTITION
from services.broker.replication.committed_topics import CommittedTopics, LiveTopic
from services.broker.replication.journal_record import JournalEntry, TopicId, carrying, closing
from services.broker.replication.node import ReplicationNode
from services.broker.replication.raft import Role
from services.broker.replication.wire.replica_fetch import EntryKind
from services.broker.storage.log import PARTITIONS_MAX, Log
from services.broker.storage.partition import AppendResult, PartitionLog

# A create that finds its name on disk waits for the journal's commit and tries again: once
# for a delete of that name that was not committed yet, once more for a concurrent re-create.
CREATE_ATTEMPTS_MAX = 3


class _IncarnationMovedError(Exception):
    """The incarnation a delete was decided for stopped being the live one before its entry
    was journaled (another delete or create came first): decide again."""


@dataclass(frozen=True, slots=True)
class PartitionRole:
    is_leader: bool
    leader_id: int  # NO_LEADER when unknown
    leader_epoch: int
    leader_address: str  # "host:port", "" when unknown
    # This broker leads but holds no lease (raft.holds_lease): it names no leader and
    # answers nothing as leader until a majority confirms it again (or it steps down).
    lease_expired: bool = False


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
        """Who leads. `lease`: a leader without its lease (issue 20, finding 9: partitioned,
        or thawed before its loop thread noticed a successor) says it knows no leader, so that
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

    def high_watermark(self, topic: str, partition: int, partition_log: PartitionLog) -> int:
        """The end of what consumers may see: the committed prefix, never above the log end."""
        return min(self.node.high_watermark(topic, partition), partition_log.log_end_offset)

    def retention_safe_offset(self, topic: str, partition: int) -> int:
        return self.node.high_watermark(topic, partition)

    # -- appends -----------------------------------------------------------------------------

    def append_from(self, topic: str, partition: int, partition_log: PartitionLog,
                    total_bytes: int, fill: Callable[[memoryview], None], acks: int
                    ) -> AppendResult:
        """Receive one batch into the log as leader; return once `acks` are in."""
        result, await_acks = self.append_deferred(topic, partition, partition_log,
                                                  total_bytes, fill, acks)
        await_acks()
        return result

    def append_deferred(self, topic: str, partition: int, partition_log: PartitionLog,
                        total_bytes: int, fill: Callable[[memoryview], None], acks: int
                        ) -> tuple[AppendResult, Callable[[], None]]:
        """Receive one batch into the log as leader, at once; the second value waits for the
        acks asked for (acks=all: the committed prefix holding its very journal entry, index
        and epoch; acks=1: nothing). A leader whose lease lapsed holds the write for up to
        `lease_wait_s` first (`_await_lease`)."""
        lease_wait_s = self.node.config.lease_wait_s
        role = self.require_leader(topic, partition, lease_wait_s=lease_wait_s)
        epoch = role.leader_epoch
        appended: list[JournalEntry] = []

        def journal_it(header, base_offset: int) -> None:
            with self._metadata_lock:
                if topic in self._deleting:
                    raise UnknownTopicOrPartitionError(f"topic {topic!r} is being deleted")
                appended.append(self.node.journal.append(
                    epoch, EntryKind.BATCH, topic=topic, partition=partition,
                    base_offset=base_offset, record_count=header.record_count,
                    batch_bytes=header.total_bytes))

        result = partition_log.append_from(total_bytes, fill, leader_epoch=epoch,
                                           on_append=journal_it)
        self.node.leader_appended()
        if not result.duplicate and not is_internal(topic):
            self._counters.appended(total_bytes, result.record_count)
        what = f"{topic}/{partition}"

        def await_acks() -> None:
            if acks != ACKS_ALL:
                # Held only by this leader: answered only while it still holds the lease
                # (a thawed leader's acks=1 success would be for a batch its successor lacks).
                self.require_leader(topic, partition, lease_wait_s=lease_wait_s)
                return
            # A retry's original entry: the acknowledgement must name it, too.
            entry = appended[0] if appended else self.node.journal.find_batch(
                topic, partition, result.base_offset)
            if entry is None and self.node.journal.compacted_batch(topic, partition,
                                                                   result.base_offset):
                return  # compacted: only committed entries ever are
            if entry is None:
                raise NotEnoughReplicasError(f"{what}: the batch at offset {result.base_offset} "
                                             "has no journal entry here; retry")
            self._await_entry(entry, epoch, what)

        return result, await_acks

    def append(self, topic: str, partition: int, batch: bytes, acks: int = ACKS_ALL
               ) -> AppendResult:
        """The same from bytes in memory (committed offsets)."""
        source = memoryview(batch).cast("B")

        def copy(region: memoryview) -> None:
            region[:] = source

        return self.append_from(topic, partition, self._log.partition(topic, partition),
                                source.nbytes, copy, acks)

    def append_offsets(self, batch: bytes) -> None:
        self.append(OFFSETS_TOPIC, OFFSETS_PARTITION, batch)

    # -- DeleteRecords -----------------------------------------------------------------------

    def delete_records_deferred(self, topic: str, partition: int, partition_log: PartitionLog,
                                offset: int) -> Callable[[], int]:
        """As leader, journal a DELETE_RECORDS moving the partition's log start to `offset`
        (HIGH_WATERMARK: the high watermark) at once; the returned call waits until the entry
        is committed and applied here, and returns the log start then. Nothing is journaled
        for an offset at or below the current log start (the call returns it). NotLeaderError
        (a lapsed lease is waited for first, as a write's), OffsetOutOfRangeError above the
        high watermark, UnknownTopicOrPartitionError while the topic is being deleted;
        the call raises NotLeaderError / NotEnoughReplicasError as an acks=all produce."""
        role = self.require_leader(topic, partition, lease_wait_s=self.node.config.lease_wait_s)
        epoch = role.leader_epoch
        high_watermark = self.high_watermark(topic, partition, partition_log)
        target = high_watermark if offset == HIGH_WATERMARK else offset
        if not 0 <= target <= high_watermark:
            raise OffsetOutOfRangeError(f"{topic}/{partition}: cannot delete records below "
                                        f"{offset}, the high watermark is {high_watermark}")
        if target <= partition_log.log_start_offset:
            return lambda: partition_log.log_start_offset
        with self._metadata_lock:
            if topic in self._deleting:
                raise UnknownTopicOrPartitionError(f"topic {topic!r} is being deleted")
            entry = self.node.journal.append(epoch, EntryKind.DELETE_RECORDS, topic=topic,
                                             partition=partition, base_offset=target)
        self.node.leader_appended()
        what = f"{topic}/{partition}"

        def await_moved() -> int:
            self._await_entry(entry, epoch, what)
            node = self.node
            # Committed is published a moment before it is applied (same lock, same step):
            # the answer promises the move is done here.
            node.wait_changed(lambda: node.applied > entry.index, self._ack_timeout_s)
            return partition_log.log_start_offset

        return await_moved

    def _await_entry(self, entry: JournalEntry, epoch: int, what: str) -> None:
        """Return once the committed prefix holds `entry` itself (its index AND epoch). A
        leader that stepped down stops waiting: unless its entry is already committed, the
        answer is NOT_LEADER (retriable; the idempotent retry finds its batch, or appends it
        anew), never a success inferred from offsets or indexes that another leader's entries
        may now cover (issue 20, finding 2; Raft §5.3, Kafka's leader epochs)."""
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
            self._await_entry(entry, epoch, name)
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
            self._await_entry(entry, role.leader_epoch, name)
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
            self._await_entry(JournalEntry(end - 1, entry_epoch, EntryKind.NOOP), epoch, what)

    def pending_deletes(self) -> list[str]:
        """The topics this leader journaled a delete of and still refuses produce for."""
        with self._metadata_lock:
            return sorted(self._deleting)

    def forget_delete(self, name: str) -> None:
        """The delete of `name` is over (committed, or its entry is gone)."""
        with self._metadata_lock:
            self._deleting.discard(name)
