"""One partition as a request sees it (Kafka's `kafka.cluster.Partition`, Redpanda's
`cluster::partition`): its log on this broker (storage's `PartitionLog`) bound to the replica
manager of the replication group that replicates it, so a handler finds a partition once
(partition_table.py) and then asks it everything: who leads it, its high watermark, to append
a batch and wait for the acks asked for, what a consumer may read, to move its log start.

Its rules: NOT_LEADER naming the leader from a broker that does not lead it or has no lease (a
write to a leader whose lease lapsed waits for it first, at most `lease_wait_s`: backpressure
rather than a refusal); a leader's append goes into the log and, under the partition's lock
before it is visible, into its group's journal (replica_manager.py `journal_batch`); acks=all
is answered once the committed prefix holds that very entry (index and epoch), acks=1 once the
leader still holds its lease, NOT_ENOUGH_REPLICAS when a majority does not confirm in time; the
high watermark is the committed prefix, never above this log's end.

Thread-safe as its two parts are; holds no state of its own. A Partition is made per request
and never kept: a deleted and re-created topic is another PartitionLog.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from common.kaska.errors import OffsetOutOfRangeError
from common.kaska.protocol.delete_records import HIGH_WATERMARK
from common.kaska.protocol.produce import ACKS_ALL
from common.kaska.record_batch import BatchHeader
from services.broker.replication.journal import JournalEntry
from services.broker.storage.partition import AppendResult, PartitionLog
from services.broker.storage.segment import FileSlice, copy_slices


@dataclass(frozen=True, slots=True)
class FetchedRange:
    """What a consumer's fetch from `offset` found: whole batches below the high watermark
    (sent with sendfile, or copied with `copy()`), and the bounds it was read within."""

    offset: int
    high_watermark: int
    log_start_offset: int
    slices: list[FileSlice]

    @property
    def caught_up(self) -> bool:
        """Nothing to read yet: the fetch asked for the high watermark itself."""
        return self.offset == self.high_watermark

    @property
    def above_high_watermark(self) -> bool:
        """In this leader's log but not known committed yet (right after a failover)."""
        return self.offset > self.high_watermark

    def copy(self) -> bytes:
        return copy_slices(self.slices)


@dataclass(frozen=True, slots=True)
class PartitionRole:
    """Who leads a partition, as this broker sees it now."""

    is_leader: bool
    leader_id: int  # NO_LEADER when unknown
    leader_epoch: int
    leader_address: str  # "host:port", "" when unknown
    # This broker leads but holds no lease (raft.holds_lease): it names no leader and
    # answers nothing as leader until a majority confirms it again (or it steps down).
    lease_expired: bool = False


class PartitionGroup(Protocol):
    """What a partition asks of the replication group that holds it (implemented by
    cluster/replica_manager.py's ReplicaManager, which makes the partitions of its group)."""

    def require_leader(self, topic: str, partition: int, *, lease: bool = True,
                       lease_wait_s: float = 0.0) -> PartitionRole: ...

    def committed_end(self, topic: str, partition: int) -> int: ...

    def journal_batch(self, epoch: int, topic: str, partition: int, header: BatchHeader,
                      base_offset: int) -> JournalEntry: ...

    def appended(self, topic: str, total_bytes: int, result: AppendResult) -> None: ...

    def batch_entry(self, topic: str, partition: int, base_offset: int
                    ) -> JournalEntry | None: ...

    def journal_delete_records(self, epoch: int, topic: str, partition: int, offset: int
                               ) -> JournalEntry: ...

    def await_applied(self, entry: JournalEntry) -> None: ...

    def await_entry(self, entry: JournalEntry, epoch: int, what: str) -> None: ...


class Partition:
    def __init__(self, topic: str, number: int, log: PartitionLog,
                 group: PartitionGroup) -> None:
        self.topic = topic
        self.number = number
        self.log = log
        self._group = group

    def __repr__(self) -> str:
        return f"Partition({self.topic}/{self.number})"

    # -- leadership and visibility -----------------------------------------------------------

    def require_leader(self, *, lease: bool = True) -> PartitionRole:
        """This broker's role, when it leads the partition; NotLeaderError naming the leader
        otherwise. `lease=False`: a write, whose append waits for a lapsed lease itself."""
        return self._group.require_leader(self.topic, self.number, lease=lease)

    def high_watermark(self) -> int:
        """The end of what consumers may see: the committed prefix, never above the log end."""
        return min(self._group.committed_end(self.topic, self.number), self.log.log_end_offset)

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    # -- writes ------------------------------------------------------------------------------

    def append_deferred(self, total_bytes: int, fill: Callable[[memoryview], None], acks: int
                        ) -> tuple[AppendResult, Callable[[], None]]:
        """Append one batch as leader at once: `fill` copies its `total_bytes` into the log's
        reserved region (zero copy from the connection's buffer). The second value waits for
        the acks asked for (acks=all: a majority holds the batch's own journal entry)."""
        group = self._group
        role = self._require_writable_leader()
        epoch = role.leader_epoch
        appended: list[JournalEntry] = []

        def journal_it(header: BatchHeader, base_offset: int) -> None:
            appended.append(group.journal_batch(epoch, self.topic, self.number, header,
                                                base_offset))

        result = self.log.append_from(total_bytes, fill, leader_epoch=epoch,
                                      on_append=journal_it)
        group.appended(self.topic, total_bytes, result)

        def await_acks() -> None:
            if acks != ACKS_ALL:
                # Held only by this leader: answered only while it still holds the lease
                # (a thawed leader's acks=1 success would be for a batch its successor lacks).
                self._require_writable_leader()
                return
            entry = appended[0] if appended else group.batch_entry(self.topic, self.number,
                                                                   result.base_offset)
            if entry is not None:  # None: compacted, so committed
                group.await_entry(entry, epoch, f"{self.topic}/{self.number}")

        return result, await_acks

    def append(self, batch: bytes, acks: int = ACKS_ALL) -> AppendResult:
        """The same from bytes in memory, waiting for the acks (committed offsets)."""
        source = memoryview(batch).cast("B")

        def copy(region: memoryview) -> None:
            region[:] = source

        result, await_acks = self.append_deferred(source.nbytes, copy, acks)
        await_acks()
        return result

    def delete_records_deferred(self, offset: int) -> Callable[[], int]:
        """As leader, journal a DELETE_RECORDS moving the log start to `offset` (HIGH_WATERMARK:
        the high watermark) at once; the returned call waits until the entry is committed and
        applied here, and returns the log start then. Nothing is journaled for an offset at or
        below the current log start (the call returns it). NotLeaderError (a lapsed lease is
        waited for first, as a write's), OffsetOutOfRangeError above the high watermark,
        UnknownTopicOrPartitionError while the topic is being deleted; the call raises
        NotLeaderError / NotEnoughReplicasError as an acks=all produce."""
        epoch = self._require_writable_leader().leader_epoch
        high_watermark = self.high_watermark()
        target = high_watermark if offset == HIGH_WATERMARK else offset
        if not 0 <= target <= high_watermark:
            raise OffsetOutOfRangeError(f"{self.topic}/{self.number}: cannot delete records "
                                        f"below {offset}, the high watermark is "
                                        f"{high_watermark}")
        if target <= self.log.log_start_offset:
            return lambda: self.log.log_start_offset
        entry = self._group.journal_delete_records(epoch, self.topic, self.number, target)

        def await_moved() -> int:
            self._group.await_entry(entry, epoch, f"{self.topic}/{self.number}")
            self._group.await_applied(entry)  # the answer promises the move is done here
            return self.log.log_start_offset

        return await_moved

    def _require_writable_leader(self) -> PartitionRole:
        """The role for a write: a leader whose lease lapsed holds it until the lease is back
        (at most `lease_wait_s`), then NotLeaderError."""
        return self._group.require_leader(self.topic, self.number,
                                          lease_wait_s=self._group.lease_wait_s)

    # -- reads -------------------------------------------------------------------------------

    def fetch(self, offset: int, max_bytes: int) -> FetchedRange:
        """A consumer's read from `offset`: whole batches below the high watermark, at most
        `max_bytes` but at least one whole batch when there is one (`max_bytes` <= 0: none,
        only the bounds). OffsetOutOfRangeError outside [log start, log end]; between the
        high watermark and the log end nothing is read (`above_high_watermark`)."""
        high_watermark = self.high_watermark()
        start = self.log.log_start_offset
        if not start <= offset <= self.log.log_end_offset:
            raise OffsetOutOfRangeError(f"offset {offset} outside [{start}, {high_watermark}] "
                                        f"of {self.topic}/{self.number}")
        slices = []
        if offset < high_watermark and max_bytes > 0:
            slices = self.log.read(offset, max_bytes, upto_offset=high_watermark)
        return FetchedRange(offset, high_watermark, self.log.log_start_offset, slices)
