"""The journal snapshot: the state a compacted journal prefix leaves behind (Raft §7, KIP-630;
docs/replication.md "Compaction").

A snapshot replaces the journal entries below its `end` (the table's format is in
wire/snapshot_fetch.py). It keeps exactly what later entries, recovery and
replication need of the prefix:

- the epoch cache of the prefix, whole (one pair per epoch): a follower's `last_fetched_epoch`
  below the snapshot is still checked (OffsetsForLeaderEpoch), and `epoch_of(index)` still
  names the epoch of a compacted entry (an acknowledgement names its entry's epoch);
- the live topics with their TopicId (the (epoch, index) of their CREATE_TOPIC entry, or the
  metadata group's incarnation a data group's CREATE_TOPIC carries: journal_record.py) and
  partition counts: later entries derive their topic ids from them, `reconcile` expects them
  on disk, and a DELETE_TOPIC after the snapshot names them;
- every partition's end offset (the largest end of the prefix's BATCH/SKIPPED entries of the
  live incarnation): the high watermark the prefix makes, and the bytes `reconcile` expects;
- every partition's log start a DELETE_RECORDS entry of the prefix moved it to (the largest
  one; only for live incarnations): a follower that installs the snapshot, and a broker that
  restarts from it, move their own log starts there, so a compacted DeleteRecords is never lost
  (its entry no longer exists to be applied);
- in a data group, `metadata_end_seen`: the largest metadata group prefix end its topic mirror
  entries carried (journal_record.py, `metadata_end_seen`): the mirror never acts on a copy of the
  metadata group shorter than that (topic_mirror.py), so it must outlive the entries that
  carried it. It never decreases.

Only committed (and applied) entries are ever folded in, so a DELETE_TOPIC in the prefix has
been carried out: its topic is simply gone from the snapshot (deleted incarnations are not kept:
topic churn does not grow it). Pure functions; thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from common.kaska.topic_name import is_internal
from services.broker.replication.wire.replica_fetch import EntryKind
from services.broker.replication.wire.snapshot_fetch import (
    NO_TOPIC_ID,
    PartitionEnd,
    Snapshot,
    SnapshotTopic,
)


class CommittedEntry(Protocol):
    """What `advance` reads of a journal entry (journal_record.py's JournalEntry; journal_record.py
    imports this module, so this one names the shape rather than the class)."""

    index: int
    epoch: int
    kind: EntryKind
    topic: str
    partition: int
    partitions: int

    base_offset: int

    @property
    def end_offset(self) -> int: ...

    @property
    def carried_topic_id(self) -> tuple[int, int] | None: ...

    @property
    def metadata_end_seen(self) -> int: ...

__all__ = ["NO_TOPIC_ID", "Snapshot", "advance", "forget_topic", "log_starts",
           "partition_ends"]


def advance(snapshot: Snapshot, entries: Iterable[CommittedEntry]) -> Snapshot:
    """The snapshot of the prefix up to the last of `entries`, which continue `snapshot`
    (dense indexes from snapshot.end) and are all committed."""
    epochs = list(snapshot.epochs)
    topics = {topic.name: topic for topic in snapshot.topics}
    ends = partition_ends(snapshot)
    starts = log_starts(snapshot)
    end = snapshot.end
    metadata_end_seen = snapshot.metadata_end_seen
    for entry in entries:
        assert entry.index == end, f"entry {entry.index} does not follow {end}"
        end += 1
        metadata_end_seen = max(metadata_end_seen, entry.metadata_end_seen)
        if not epochs or epochs[-1][0] != entry.epoch:
            epochs.append((entry.epoch, entry.index))
        kind, name = entry.kind, entry.topic
        if kind is EntryKind.CREATE_TOPIC:
            forget_topic(ends, name)
            forget_topic(starts, name)
            id_epoch, id_index = entry.carried_topic_id or (entry.epoch, entry.index)
            topics[name] = SnapshotTopic(name, id_epoch, id_index, entry.partitions)
        elif kind is EntryKind.DELETE_TOPIC:
            forget_topic(ends, name)
            forget_topic(starts, name)
            topics.pop(name, None)
        elif kind is EntryKind.DELETE_RECORDS and (name in topics or is_internal(name)):
            key = (name, entry.partition)
            starts[key] = max(starts.get(key, 0), entry.base_offset)
        elif kind in (EntryKind.BATCH, EntryKind.SKIPPED) and (name in topics
                                                                or is_internal(name)):
            key = (name, entry.partition)
            ends[key] = max(ends.get(key, 0), entry.end_offset)
    return Snapshot(end, tuple(epochs), tuple(topics[name] for name in sorted(topics)),
                    tuple(PartitionEnd(topic, partition, offset)
                          for (topic, partition), offset in sorted(ends.items())),
                    metadata_end_seen,
                    tuple(PartitionEnd(topic, partition, offset)
                          for (topic, partition), offset in sorted(starts.items())))


def forget_topic(ends: dict[tuple[str, int], int], topic: str) -> None:
    """Drop every partition's end (or high watermark) of `topic`: its incarnation is gone."""
    for key in [key for key in ends if key[0] == topic]:
        del ends[key]


def log_starts(snapshot: Snapshot) -> dict[tuple[str, int], int]:
    """(topic, partition) -> the log start DELETE_RECORDS entries of the prefix set."""
    return {(start.topic, start.partition): start.end_offset for start in snapshot.log_starts}


def partition_ends(snapshot: Snapshot) -> dict[tuple[str, int], int]:
    """(topic, partition) -> end offset."""
    return {(end.topic, end.partition): end.end_offset for end in snapshot.partition_ends}

