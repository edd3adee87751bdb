"""reconcile: make the journal and the data directory agree, at broker start, before it listens.

A SIGKILL can stop the broker between the two halves of any change (docs/replication.md,
"Recovery"): a leader's batch is in its partition but its journal entry is not yet written; a
follower's entry is written but a machine crash lost the page cache of the batch; a follower's
truncation cut the partitions but not yet the journal; a committed DELETE_TOPIC was not yet
applied. `reconcile(journal, log, commit)` repairs every such state, in this order:

1. Replay the journal into what the data directory should hold: topics (CREATE_TOPIC adds one
   with its partition count and starts it afresh; a DELETE_TOPIC with index < commit removes
   it; an uncommitted DELETE_TOPIC does nothing, since only a committed delete is applied) and,
   per partition, the expected end offset: the largest end of its BATCH and SKIPPED entries
   (SKIPPED entries require no bytes). BATCH/SKIPPED entries of a topic that does not exist at
   that point of the replay require nothing (their bytes went with the topic).
2. Cut the journal at the first BATCH entry whose bytes are not in its partition: the topic or
   partition is missing, the topic has another partition count than its CREATE_TOPIC says (it
   is another incarnation), the partition ends before the entry's end offset, or -- checked on
   the trailing batches of each partition, one header read each -- the batch found at the
   entry's base offset is not the entry's (base offset, record count, size). A batch below
   the partition's log start offset is fine (retention deleted it). Replay again; repeat until
   no entry is cut.
3. Delete topics the replay does not expect (no surviving CREATE_TOPIC, or a committed
   DELETE_TOPIC not applied yet, or another partition count); create (empty) expected topics
   that are missing (no BATCH entry can reference them after step 2) -- unless the disk is
   full (StorageFullError): such a topic stays missing, logged, rather than the broker not
   starting.
4. Truncate partitions that end past their expected end (data whose journal entry never made
   it). When a truncation lands below the expected end (a batch straddling it went whole), go
   back to step 1.

A compacted journal (snapshot.py) starts the replay from its snapshot: its live topics and
partition ends are expected like those of CREATE_TOPIC and BATCH entries, but no entry can be
cut below it (its entries are committed, and compaction synced their bytes first): a partition
ending before the snapshot's end (a disk that lost synced data) is logged as an error and left
as it is.

Internal topics (names starting with "__", such as `__offsets`, which the broker creates itself
at start) are never deleted or created here; their batches are journaled like any other, so
steps 2 and 4 apply to them, with the partition count found in the data directory when the
journal holds no CREATE_TOPIC for them.

Deliberately left alone: a partition that ends before a SKIPPED entry's end (the entry
requires no bytes; the next BATCH after it, or the follower's apply, restarts the partition).

Idempotent: a second run finds nothing to change. It runs alone (before the broker listens),
so it takes no lock of its own beyond those of Journal and Log.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from common.kaska.errors import CorruptBatchError, OffsetOutOfRangeError
from common.kaska.record_batch import HEADER_BYTES, parse_header
from services.broker.replication.journal import Journal, JournalEntry, Snapshot
from services.broker.replication.snapshot import partition_ends
from services.broker.replication.wire.replica_fetch import EntryKind
from services.broker.storage.errors import StorageFullError
from services.broker.storage.log import Log
from services.broker.storage.partition import PartitionLog

log = logging.getLogger(__name__)

INTERNAL_TOPIC_PREFIX = "__"

Key = tuple[str, int]  # (topic, partition)


@dataclass(frozen=True, slots=True)
class TruncatedPartition:
    topic: str
    partition: int
    end_before: int  # log end offsets
    end_after: int


@dataclass
class ReconcileReport:
    """What one `reconcile` run changed."""

    journal_end_before: int
    journal_end: int = 0
    topics_deleted: list[str] = field(default_factory=list)
    topics_created: list[str] = field(default_factory=list)
    partitions_truncated: list[TruncatedPartition] = field(default_factory=list)

    @property
    def entries_cut(self) -> int:
        return self.journal_end_before - self.journal_end

    @property
    def changed(self) -> bool:
        return bool(self.entries_cut or self.topics_deleted or self.topics_created
                    or self.partitions_truncated)


@dataclass
class _Expected:
    """What the journal says the data directory holds (step 1)."""

    topics: dict[str, int] = field(default_factory=dict)  # name -> partition count
    ends: dict[Key, int] = field(default_factory=dict)  # expected log end offsets
    batches: dict[Key, list[JournalEntry]] = field(default_factory=dict)  # in index order
    deleted: set[str] = field(default_factory=set)  # gone by a committed DELETE_TOPIC

    def forget(self, topic: str) -> None:
        """A topic (re)created or deleted: what earlier entries said of it no longer holds."""
        for table in (self.ends, self.batches):
            for key in [key for key in table if key[0] == topic]:
                del table[key]


def is_internal(topic: str) -> bool:
    return topic.startswith(INTERNAL_TOPIC_PREFIX)


def reconcile(journal: Journal, log_store: Log, commit: int) -> ReconcileReport:
    """Make `journal` and `log_store` agree (see the module docstring); `commit` is the commit
    index the broker restarts from. Returns (and logs) what changed."""
    report = ReconcileReport(journal_end_before=journal.end)
    while True:
        expected = _cut_journal(journal, log_store, commit)
        _settle_topics(expected, log_store, report)
        if not _truncate_partitions(expected, log_store, report):
            break
    report.journal_end = journal.end
    _check_snapshot_bytes(journal.snapshot, log_store)
    _log_report(report, commit)
    return report


# -- step 1: replay -----------------------------------------------------------------------


def _replay(snapshot: Snapshot, entries: Iterable[JournalEntry], commit: int) -> _Expected:
    expected = _Expected()
    expected.topics.update((topic.name, topic.partitions) for topic in snapshot.topics)
    expected.ends.update(partition_ends(snapshot))
    for entry in entries:
        kind, topic = entry.kind, entry.topic
        if kind is EntryKind.CREATE_TOPIC:
            expected.forget(topic)
            expected.topics[topic] = entry.partitions
            expected.deleted.discard(topic)
        elif kind is EntryKind.DELETE_TOPIC and entry.index < commit:
            expected.forget(topic)
            expected.topics.pop(topic, None)
            expected.deleted.add(topic)
        elif kind in (EntryKind.BATCH, EntryKind.SKIPPED) and (
                topic in expected.topics or is_internal(topic)):
            key = (topic, entry.partition)
            expected.ends[key] = max(expected.ends.get(key, 0), entry.end_offset)
            if kind is EntryKind.BATCH:
                expected.batches.setdefault(key, []).append(entry)
    return expected


# -- step 2: cut the journal at the first batch the data directory lacks ------------------


def _cut_journal(journal: Journal, log_store: Log, commit: int) -> _Expected:
    while True:
        expected = _replay(journal.snapshot, journal.entries(), commit)
        cut = _first_missing(expected, log_store)
        if cut is None:
            return expected
        entry = journal.entry(cut)
        if cut < commit:
            # The bytes of a committed entry are gone (a machine crash lost unflushed pages):
            # the journal cannot point at data that is not there; the leader resends it.
            log.error("journal entry %d (below the commit index %d) names %s/%d offsets "
                      "%d..%d, which are not in the data directory; cutting committed entries",
                      cut, commit, entry.topic, entry.partition, entry.base_offset,
                      entry.end_offset)
        log.warning("journal entry %d names %s/%d offsets %d..%d, which are not in the data "
                    "directory; the journal is cut there (%d entries dropped)", cut,
                    entry.topic, entry.partition, entry.base_offset, entry.end_offset,
                    journal.end - cut)
        journal.truncate(cut)


def _first_missing(expected: _Expected, log_store: Log) -> int | None:
    """The lowest index of a BATCH entry whose bytes are not in its partition; None if none."""
    topics_in_log = log_store.topics()
    cut: int | None = None
    for (topic, number), batches in expected.batches.items():
        partition = _partition(log_store, topics_in_log, expected, topic, number)
        index = batches[0].index if partition is None else _first_missing_batch(partition,
                                                                                batches)
        if index is not None and (cut is None or index < cut):
            cut = index
    return cut


def _partition(log_store: Log, topics_in_log: dict[str, int], expected: _Expected,
               topic: str, number: int) -> PartitionLog | None:
    """The partition the journal means, None when the data directory has no such thing."""
    count = topics_in_log.get(topic)
    if count is None or not 0 <= number < count:
        return None
    wanted = expected.topics.get(topic)
    if wanted is not None and wanted != count:
        return None  # a topic of that name, but not the one the journal created
    return log_store.partition(topic, number)


def _first_missing_batch(partition: PartitionLog, batches: list[JournalEntry]) -> int | None:
    """The index of the partition's first BATCH entry whose bytes it lacks: the first one
    ending past the log end, or the first of the trailing run whose batch is another one."""
    log_end = partition.log_end_offset
    held = next((i for i, entry in enumerate(batches) if entry.end_offset > log_end),
                len(batches))
    # Data diverging from the journal (another history) shows at its end; checking only the
    # trailing batches keeps a clean start at one header read per partition.
    while held and not _holds(partition, batches[held - 1]):
        held -= 1
    return batches[held].index if held < len(batches) else None


def _holds(partition: PartitionLog, entry: JournalEntry) -> bool:
    """Whether the batch at the entry's base offset is the entry's (offsets, size)."""
    if entry.base_offset < partition.held_start_offset:
        return True  # retention, DeleteRecords (or a restart) removed it: nothing to compare
    try:
        slices = partition.read(entry.base_offset, entry.batch_bytes,
                                upto_offset=entry.end_offset, below_start=True)
    except OffsetOutOfRangeError:
        return False
    if not slices:
        return False  # the batch holding the base offset runs past the entry's end
    first = slices[0]
    try:
        header = parse_header(os.pread(first.fd, HEADER_BYTES, first.position))
    except CorruptBatchError:
        return False
    return (header.base_offset == entry.base_offset
            and header.record_count == entry.record_count
            and header.total_bytes == entry.batch_bytes)


# -- step 3: topics ------------------------------------------------------------------------


def _settle_topics(expected: _Expected, log_store: Log, report: ReconcileReport) -> None:
    for name, count in sorted(log_store.topics().items()):
        wanted = expected.topics.get(name)
        if is_internal(name) or wanted == count:
            continue
        if name in expected.deleted:
            reason = "its deletion is committed"
        elif wanted is None:
            reason = "no journal entry creates it"
        else:
            reason = f"it has {count} partition(s) where the journal says {wanted}"
        log.warning("topic %r: deleted, %s", name, reason)
        log_store.delete_topic(name)
        report.topics_deleted.append(name)
    referenced = {topic for topic, _partition in expected.batches}
    present = log_store.topics()
    for name, count in sorted(expected.topics.items()):
        if is_internal(name) or name in present or name in referenced:
            continue  # a referenced topic is never missing here: step 2 cut its entries
        try:
            log_store.create_topic(name, count)
        except StorageFullError:
            # A restart on a full disk must not die of it. Nothing references the topic, so
            # it is only missing (a client's retried create makes it); counted and logged.
            log.warning("topic %r: the journal creates it, but there is no room for it", name)
            continue
        log.warning("topic %r: created (empty), the journal creates it", name)
        report.topics_created.append(name)


# -- step 4: partitions past their journal -------------------------------------------------


def _truncate_partitions(expected: _Expected, log_store: Log, report: ReconcileReport) -> bool:
    """Truncate every partition ending past its expected end; True when one ended below it
    (a straddling batch went whole), so the journal must be checked again."""
    again = False
    for name in sorted(log_store.topics()):
        for number in log_store.held(name):
            partition = log_store.partition(name, number)
            wanted = expected.ends.get((name, number), 0)
            end_before = partition.log_end_offset
            if end_before <= wanted:
                continue
            partition.truncate_to(wanted)
            end_after = partition.log_end_offset
            log.warning("%s/%d: data past its journal entries; truncated from offset %d to %d",
                        name, number, end_before, end_after)
            report.partitions_truncated.append(
                TruncatedPartition(name, number, end_before, end_after))
            again = again or end_after < wanted
    return again


def _check_snapshot_bytes(snapshot: Snapshot, log_store: Log) -> None:
    """Say so when a partition lacks committed bytes its snapshot covers: nothing can cut the
    journal there, and the leader will not send them again (docs/replication.md)."""
    topics = log_store.topics()
    for (topic, number), end in partition_ends(snapshot).items():
        if number >= topics.get(topic, 0) or not log_store.holds(topic, number):
            continue
        held = log_store.partition(topic, number).log_end_offset
        if held < end:
            log.error("%s/%d ends at %d, below offset %d of the journal's snapshot: committed "
                      "bytes are lost here (restore the data directory, or empty it to rebuild "
                      "this broker from its peers)", topic, number, held, end)


def _log_report(report: ReconcileReport, commit: int) -> None:
    if not report.changed:
        log.info("reconcile: journal (%d entries, commit %d) and data directory agree",
                 report.journal_end, commit)
        return
    log.warning("reconcile: %d journal entries cut (end %d, commit %d); topics deleted %s, "
                "created %s; %d partition(s) truncated", report.entries_cut, report.journal_end,
                commit, report.topics_deleted, report.topics_created,
                len(report.partitions_truncated))
