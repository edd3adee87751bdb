"""EntryEffects: what journal entries do to the broker's storage (the `Log`'s topics and
partitions), on a follower that applies the leader's entries, on any broker that truncates
entries or carries out a committed DELETE_TOPIC, and when entries' bytes must be made durable.

It owns the order of those writes, which recovery (`reconcile`) relies on:
- applying an entry: the data first, then the journal entry (a batch's entry is journaled by
  the partition's append callback, a CREATE_TOPIC's after its topic exists), so a crash or a
  refused write (a full disk) never leaves an entry without its data; the entry comes again
  with the next fetch;
- truncating: the data of the dropped entries first (partitions cut, topics they created
  deleted), then the journal; a crash in between is repaired by reconcile at the next start;
- a DELETE_TOPIC removes only the incarnation it names (Kafka's topic ids): a topic of that
  name re-created later stays;
- a committed DELETE_RECORDS moves its partition's log start (persisted by the partition
  before any segment is deleted) only in the incarnation it names, never past the partition's
  end; the snapshot's log starts (DELETE_RECORDS entries compacted away) are enforced the same
  way after a snapshot install and at every start (idempotent: a start only moves forward).

Invariants: entries are applied one by one in index order, each whole; a partition never holds
bytes past its journal after an apply (foreign bytes are cut first); a CREATE_TOPIC of a name
already on disk replaces that older incarnation, so the result is what applying the entries
one by one gives. High watermarks of a topic that makes way are forgotten
(snapshot.forget_topic).

Threads: `apply`, `cut` run on the replication loop thread under the node's `_lock`;
`delete_incarnation` and `delete_records` under `_lock` on whichever thread advanced the
commit; `enforce_log_starts` under `_lock` (install, start); `sync_partitions`
outside `_lock` (under the node's `_sync_lock`, or on the loop thread before a compaction).
The journal and the partitions take their own locks (after `_lock`, in that order).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from common.kaska.errors import KaskaStorageError, UnknownTopicOrPartitionError
from common.kaska.topic_name import OFFSETS_TOPIC
from services.broker.replication.config import ReplicationCounters
from services.broker.replication.journal import Journal, JournalEntry
from services.broker.replication.snapshot import forget_topic, log_starts
from services.broker.replication.wire.replica_fetch import EntryHeader, EntryKind
from services.broker.replication.wire.snapshot_fetch import Snapshot
from services.broker.storage.errors import PartitionClosedError
from services.broker.storage.log import Log

log = logging.getLogger(__name__)

HighWatermarks = dict[tuple[str, int], int]


class EntryEffects:
    def __init__(self, node_id: int, journal: Journal, log_store: Log,
                 on_topic_deleted: Callable[[str], None],
                 counters: ReplicationCounters | None = None) -> None:
        self._node_id = node_id
        self._journal = journal
        self._log = log_store
        self._on_topic_deleted = on_topic_deleted
        self._counters = counters or ReplicationCounters()

    # -- a follower's apply of the leader's entries -----------------------------------------

    def apply(self, header: EntryHeader, data: memoryview, hw: HighWatermarks,
              offsets_backlog: list[bytes]) -> None:
        """Apply one fetched entry; an __offsets batch is queued on `offsets_backlog` for the
        offsets table (read after `_lock` is released)."""
        entry = JournalEntry(header.index, header.epoch, header.kind, header.topic,
                             header.partition, header.base_offset, header.record_count,
                             header.partitions, header.data_bytes)
        kind = header.kind
        if kind is EntryKind.BATCH:
            self._apply_batch(entry, data, offsets_backlog)
            return
        if kind is EntryKind.SKIPPED:
            self._skip_to(entry)
        elif kind is EntryKind.CREATE_TOPIC:
            self._replace_topic(entry, hw)
            self._journal.append_replica(entry)
            return
        self._journal.append_replica(entry)

    def _replace_topic(self, entry: JournalEntry, hw: HighWatermarks) -> None:
        """The topic before its entry (like a batch): if the disk refuses the topic, the entry
        is not journaled either and comes again with the next fetch. A topic of that name
        already here is another incarnation -- an older one whose DELETE_TOPIC this broker has
        not applied yet (a leader journals a CREATE_TOPIC only once that delete is committed),
        or the empty leftover of this very entry's refused append -- and makes way, so the
        result is what applying the entries one by one gives."""
        topic = entry.topic
        if topic in self._log.topics():
            log.info("broker %d: topic %r re-created by entry %d; the incarnation %s on disk "
                     "makes way", self._node_id, topic, entry.index,
                     self._journal.incarnation(topic))
            self._log.delete_topic(topic)
            forget_topic(hw, topic)
        self._log.create_topic(topic, entry.partitions)

    def _apply_batch(self, entry: JournalEntry, data: memoryview,
                     offsets_backlog: list[bytes]) -> None:
        partition = self._log.partition(entry.topic, entry.partition)
        if partition.log_end_offset < entry.base_offset:
            partition.restart_at(entry.base_offset)  # the leader's bytes before are gone
        elif partition.log_end_offset > entry.base_offset:
            # Bytes past the journal (left by an append whose entry never made it): not ours.
            log.warning("broker %d: %s/%d holds data past its journal (%d > %d); cut",
                        self._node_id, entry.topic, entry.partition,
                        partition.log_end_offset, entry.base_offset)
            partition.truncate_to(entry.base_offset)
        partition.append_replica(data, on_append=lambda _h, _b: self._journal.append_replica(
            entry))
        if entry.topic == OFFSETS_TOPIC:
            offsets_backlog.append(bytes(data))

    def _skip_to(self, entry: JournalEntry) -> None:
        if entry.topic in self._log.topics():
            partition = self._log.partition(entry.topic, entry.partition)
            if partition.log_end_offset < entry.end_offset:
                partition.restart_at(entry.end_offset)

    # -- truncation ------------------------------------------------------------------------

    def cut(self, end: int) -> tuple[list[JournalEntry], dict[tuple[str, int], int]]:
        """Drop journal entries from `end` on, and what they stand for: the data first, then
        the journal (fsynced: the prefix below `end` stays synced). Returns the entries
        dropped (none: nothing was done) and, per partition, the offset its data was cut to."""
        doomed = self._journal.entries(end, self._journal.end)
        if not doomed:
            return doomed, {}
        cut: dict[tuple[str, int], int] = {}
        created: list[str] = []
        for entry in doomed:
            if entry.kind is EntryKind.BATCH:
                cut.setdefault((entry.topic, entry.partition), entry.base_offset)
            elif entry.kind is EntryKind.CREATE_TOPIC:
                created.append(entry.topic)
        topics = self._log.topics()
        for (topic, partition), offset in cut.items():
            if topic in topics and topic not in created:
                self._log.partition(topic, partition).truncate_to(offset)
        for topic in created:
            if topic in self._log.topics():
                self._log.delete_topic(topic)
        self._journal.truncate(end)
        return doomed, cut

    # -- a committed delete ----------------------------------------------------------------

    def delete_incarnation(self, entry: JournalEntry) -> None:
        """Remove the incarnation the DELETE_TOPIC names, and only that one: when the journal
        already holds a newer CREATE_TOPIC of the name (re-created after this delete), the
        topic on disk is that newer incarnation and stays (Kafka's topic ids)."""
        topic = entry.topic
        if entry.topic_id is None:
            # The journal knew no live incarnation of the name before this delete (its create
            # and delete both folded into the snapshot): there is nothing it can name, and a
            # topic of that name on disk is a later create's, which stays.
            log.info("broker %d: delete of topic %r (entry %d) names no incarnation; nothing "
                     "deleted", self._node_id, topic, entry.index)
            return
        current = self._journal.incarnation(topic)
        if current != entry.topic_id:
            log.info("broker %d: delete of topic %r (id %s, entry %d) applied; the topic on "
                     "disk is the newer incarnation %s and stays", self._node_id, topic,
                     tuple(entry.topic_id), entry.index, current and tuple(current))
            return
        if topic in self._log.topics():
            self._log.delete_topic(topic)
        self._on_topic_deleted(topic)

    # -- a committed DELETE_RECORDS --------------------------------------------------------

    def delete_records(self, entry: JournalEntry) -> None:
        """Move the partition's log start to the entry's offset, in the incarnation the entry
        names only (a re-created topic's partition is another log)."""
        if entry.topic_id is not None and self._journal.incarnation(entry.topic) \
                != entry.topic_id:
            log.info("broker %d: DeleteRecords of %s/%d (entry %d) names an incarnation no "
                     "longer live; nothing moved", self._node_id, entry.topic,
                     entry.partition, entry.index)
            return
        self._move_start(entry.topic, entry.partition, entry.base_offset, f"entry {entry.index}")

    def enforce_log_starts(self, snapshot: Snapshot) -> None:
        """Every log start the snapshot keeps (DELETE_RECORDS entries it folded in)."""
        for (topic, partition), offset in sorted(log_starts(snapshot).items()):
            self._move_start(topic, partition, offset, f"snapshot below {snapshot.end}")

    def _move_start(self, topic: str, number: int, offset: int, why: str) -> None:
        try:
            if topic not in self._log.topics():
                return  # deleted since, or an internal topic not held here
            partition = self._log.partition(topic, number)
            # Never past the end: a partition that lost bytes it once held (a power cut under
            # fsync policy `none`) restarts its history there, as reconcile lets it.
            moved = partition.delete_records(min(offset, partition.log_end_offset))
        except (UnknownTopicOrPartitionError, PartitionClosedError):
            return  # not held by this group's Log, or deleted meanwhile
        except KaskaStorageError as exc:
            # A full disk refused the log start file: nothing moved here; the records stay
            # readable on this broker until a later DeleteRecords or restart moves it.
            log.error("broker %d: DeleteRecords of %s/%d to %d (%s) not applied: %s",
                      self._node_id, topic, number, offset, why, exc)
            return
        if moved.records_deleted:
            self._counters.records_deleted += moved.records_deleted
            log.info("broker %d: %s/%d log start %d -> %d (%s; %d segment(s) deleted)",
                     self._node_id, topic, number, moved.previous, moved.start, why,
                     moved.segments_deleted)

    # -- durability ------------------------------------------------------------------------

    def sync_partitions(self, entries: list[JournalEntry]) -> None:
        """Fsync the partitions holding the bytes of `entries` (BATCH and SKIPPED)."""
        keys = {(entry.topic, entry.partition) for entry in entries
                if entry.kind in (EntryKind.BATCH, EntryKind.SKIPPED)}
        for topic, partition in sorted(keys):
            try:
                self._log.partition(topic, partition).sync()
            except (UnknownTopicOrPartitionError, PartitionClosedError):
                continue  # deleted since: no bytes left to keep
