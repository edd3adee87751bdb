"""Journal: the replication journal, the Raft log of the cluster (docs/replication.md).

One entry per change to the data directory, in the one order the leader made them; the
partition files hold the bytes BATCH entries point at.

The file's format and the record codec are in journal_record.py; opening and recovering the
file (a torn tail, corruption) in journal_recovery.py.

Invariants:
- Indexes are dense from `start` (the snapshot's end; 0 until the journal is first compacted):
  entry i sits at list position i - start, and `end` is the next index. Entries below `start`
  are compacted: only the snapshot's state remains of them.
- Epochs never decrease along the journal. The epoch cache `epochs()` -- (epoch, first index)
  for every epoch that has entries, compacted ones included -- is the snapshot's followed by
  the one derived from the entries, never stored otherwise.
- The file holds exactly the snapshot and the entries in memory: header (and snapshot), then
  their records, nothing after.
  An append is one `os.write` on an O_APPEND descriptor (a failed or short write is cut off
  again), truncation is one `ftruncate` at a remembered record position.

Full disk: the journal is written with `write` (no map), so a full disk is an ordinary error:
the failed or short write is cut off again and `append` / `append_replica` raise
StorageFullError (KAFKA_STORAGE_ERROR, retriable; counted in the data directory's DiskSpace)
with nothing added. The caller retries later.

Compaction (Raft §7, KIP-630): `compact(upto)` folds the entries below
`upto` -- all committed and applied, the caller's promise -- into the snapshot and rewrites the
file as header + snapshot + the later records, under a temporary name (`journal.log.tmp`),
fsynced, then renamed over `journal.log` (and the directory fsynced). A crash at any point
leaves the old file or the new one, both whole; a leftover temporary file is deleted on open.
`install(snapshot)` (a follower behind the leader's snapshot) rewrites it the same way with the
leader's snapshot and no entries: the follower's own entries go (a prefix of what the snapshot
folded, and at most a tail above its commit index that no leader vouched for).

Durability: an entry is in the page cache (it survives a SIGKILL of the broker) once `append`
returns; `flush` fsyncs. `truncate` fsyncs at once (it is rare, and a truncation lost to a
machine crash would bring back entries of an abandoned history).

Thread-safety: `_lock` guards the entries, the snapshot, the file end and the leading epoch;
it is the innermost lock of the broker (callers hold the node lock and a partition lock around
`append`), so nothing here takes another lock or waits on the network while holding it.
`end`, `start`, `snapshot`, `last_epoch` and `epochs()` are lock-free reads of values
republished whole (`end` is its own attribute, never `start` + a length read apart);
`entry`, `entries` and `end_of_epoch` take the lock for a consistent view. `flush` fsyncs
outside `_lock` (appends go on meanwhile) under `_sync_lock`, which `close` also takes, so the
descriptor is never closed under a running fsync. `compact` builds the snapshot outside both
(the committed entries it folds never change) under `_compact_lock` (one compaction at a
time), then rewrites the file under `_sync_lock` and `_lock`: appends wait for that rewrite
(the records after `upto` and one fsync). Lock order: `_compact_lock` → `_sync_lock` →
`_lock`.

Fencing: the leader appends with `append(epoch, ...)`, which raises NotLeaderError unless
`epoch` is the one set by `set_leading_epoch`; the node clears it when the broker stops
leading, so a deposed leader's late produce can never add an entry behind its successor's back.
Followers copy the leader's entries with `append_replica`.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from array import array
from pathlib import Path

from common.kaska.errors import NotLeaderError
from services.broker.replication.errors import (
    JournalClosedError,
    JournalCompactedError,
    JournalEpochError,
    JournalGapError,
)
from services.broker.replication.journal_record import (
    JOURNAL_FILE,
    JournalEntry,
    TopicId,
    encode_entry,
    file_head,
    identified,
    incarnations,
    snapshot_incarnations,
)
from services.broker.replication.journal_recovery import open_file, recover, write_file
from services.broker.replication.snapshot import Snapshot, advance, partition_ends
from services.broker.replication.wire.replica_fetch import EntryKind
from services.broker.storage.disk_space import DiskSpace
from services.broker.storage.partition import fsync_directory

# EntryKind, JournalEntry, Snapshot and TopicId: the types of the Journal's own methods.
__all__ = ["EntryKind", "Journal", "JournalEntry", "NO_EPOCH", "Snapshot", "TopicId"]

log = logging.getLogger(__name__)

NO_EPOCH = -1  # end_of_epoch's answer when no epoch qualifies (same value as raft.NO_EPOCH)


def _epoch_cache(snapshot: Snapshot, entries: list[JournalEntry]) -> tuple[tuple[int, int], ...]:
    cache: list[tuple[int, int]] = list(snapshot.epochs)
    for entry in entries:
        if not cache or entry.epoch != cache[-1][0]:
            cache.append((entry.epoch, entry.index))
    return tuple(cache)


# -- the journal --------------------------------------------------------------------------


class Journal:
    """The journal of one broker; opening it recovers the file (created when missing)."""

    def __init__(self, directory: Path | str, space: DiskSpace | None = None):
        """`space`: the data directory's DiskSpace (the Log's); None makes one (tests)."""
        self.directory = Path(directory)
        self.path = self.directory / JOURNAL_FILE
        self._space = space or DiskSpace(self.directory)
        self._lock = threading.Lock()
        self._sync_lock = threading.Lock()
        self._compact_lock = threading.Lock()
        self._closed = False
        self._leading_epoch: int | None = None
        self.directory.mkdir(parents=True, exist_ok=True)
        with self._space.writing(self.path):
            self._fd = open_file(self.path)
        try:
            scan = recover(self._fd, self.path)
        except BaseException:
            os.close(self._fd)
            raise
        self._snapshot = scan.snapshot
        self._start = scan.snapshot.end
        self._records_start = scan.records_start
        self._entries = scan.entries
        self._end = self._start + len(self._entries)
        self._incarnations = scan.incarnations
        self._positions = scan.positions
        self._file_bytes = scan.end_position
        self._epochs = _epoch_cache(scan.snapshot, self._entries)

    # -- state (lock-free) ---------------------------------------------------------------

    @property
    def end(self) -> int:
        """The next index."""
        return self._end

    @property
    def start(self) -> int:
        """The first index held as an entry: the snapshot's end (0 until compacted)."""
        return self._start

    @property
    def snapshot(self) -> Snapshot:
        """The state of the compacted prefix below `start` (empty until compacted)."""
        return self._snapshot

    @property
    def tail_bytes(self) -> int:
        """The bytes of the records held (the file without its header and snapshot)."""
        return self._file_bytes - self._records_start

    @property
    def last_epoch(self) -> int:
        """The epoch of the last entry; 0 when the journal is empty."""
        epochs = self._epochs
        return epochs[-1][0] if epochs else 0

    def epochs(self) -> tuple[tuple[int, int], ...]:
        """The epoch cache: (epoch, first index) of every epoch with entries, ascending."""
        return self._epochs

    def end_and_epochs(self) -> tuple[int, tuple[tuple[int, int], ...]]:
        """`end` and `epochs()` of one moment (the lock-free reads may straddle an append)."""
        with self._lock:
            return self._start + len(self._entries), self._epochs

    def log_state(self) -> tuple[int, tuple[tuple[int, int], ...], int]:
        """`end`, `epochs()` and `start` of one moment (raft.LogView's fields)."""
        with self._lock:
            return self._start + len(self._entries), self._epochs, self._start

    def epoch_of(self, index: int) -> int | None:
        """The epoch of the entry at `index`, compacted or not; None outside [0, end)."""
        with self._lock:
            epochs, journal_end = self._epochs, self._start + len(self._entries)
        if not 0 <= index < journal_end:
            return None
        for epoch, first in reversed(epochs):
            if first <= index:
                return epoch
        return None

    def incarnation(self, topic: str) -> TopicId | None:
        """The id of `topic`'s latest CREATE_TOPIC in the journal; None when there is none."""
        with self._lock:
            return self._incarnations.get(topic)

    @property
    def leading_epoch(self) -> int | None:
        return self._leading_epoch

    @property
    def closed(self) -> bool:
        return self._closed

    # -- reading -------------------------------------------------------------------------

    def end_of_epoch(self, epoch: int) -> tuple[int, int]:
        """Kafka's OffsetsForLeaderEpoch: (e, end) where e is the largest epoch <= `epoch` that
        has entries here and end is the index after its last entry (the next epoch's first
        index, or `end` when e is the last epoch). (NO_EPOCH, 0) when no epoch <= `epoch` has
        entries (an empty journal included): nothing here can match. A follower that gets
        (e, end) truncates to min(end, its own end of e)."""
        with self._lock:
            epochs, journal_end = self._epochs, self._start + len(self._entries)
        for i in range(len(epochs) - 1, -1, -1):
            found = epochs[i][0]
            if found <= epoch:
                return found, epochs[i + 1][1] if i + 1 < len(epochs) else journal_end
        return NO_EPOCH, 0

    def entry(self, index: int) -> JournalEntry:
        """The entry at `index`; IndexError outside [start, end) (compacted or not there)."""
        with self._lock:
            position = index - self._start
            if not 0 <= position < len(self._entries):
                raise IndexError(f"no journal entry {index} (entries {self._start}.."
                                 f"{self._start + len(self._entries)})")
            return self._entries[position]

    def entries(self, start: int = 0, stop: int | None = None) -> list[JournalEntry]:
        """The entries with start <= index < stop (stop defaults to `end`), clamped to the
        entries held (never the compacted ones) like a list slice."""
        with self._lock:
            base = self._start
            return self._entries[max(0, start - base):None if stop is None
                                 else max(0, stop - base)]

    def compacted_batch(self, topic: str, partition: int, base_offset: int) -> bool:
        """Whether the batch at `base_offset` of the journal's current incarnation of `topic`
        lies in the compacted prefix (a producer's retry of a batch committed long ago)."""
        with self._lock:
            snapshot, current = self._snapshot, self._incarnations.get(topic)
        if current != snapshot_incarnations(snapshot).get(topic):
            return False  # re-created after the snapshot: its batches are all entries
        return base_offset < partition_ends(snapshot).get((topic, partition), 0)

    def find_batch(self, topic: str, partition: int, base_offset: int) -> JournalEntry | None:
        """The BATCH entry of the journal's current incarnation of `topic` whose batch starts at
        `base_offset` (a producer's retry names its original this way), None when there is
        none. Searches back from the end and stops at the partition's first lower batch, since
        one incarnation's batches are journaled in offset order."""
        with self._lock:
            topic_id = self._incarnations.get(topic)
            for position in range(len(self._entries) - 1, -1, -1):
                entry = self._entries[position]
                if entry.topic != topic:
                    continue
                if entry.topic_id != topic_id or entry.kind is EntryKind.CREATE_TOPIC:
                    return None  # an older incarnation from here on
                if entry.kind is EntryKind.BATCH and entry.partition == partition:
                    if entry.base_offset == base_offset:
                        return entry
                    if entry.base_offset < base_offset:
                        return None
        return None

    # -- appending -----------------------------------------------------------------------

    def set_leading_epoch(self, epoch: int | None) -> None:
        """The epoch this broker leads (its appends are accepted), None when it follows."""
        with self._lock:
            self._leading_epoch = epoch

    def append(self, epoch: int, kind: EntryKind, *, topic: str = "", partition: int = 0,
               base_offset: int = 0, record_count: int = 0, partitions: int = 0,
               batch_bytes: int = 0) -> JournalEntry:
        """The leader's append at index `end`. NotLeaderError unless `epoch` is the leading
        epoch: a deposed leader is fenced here, under the lock every append takes."""
        with self._lock:
            self._check_open()
            if self._leading_epoch is None or epoch != self._leading_epoch:
                raise NotLeaderError(f"journal: epoch {epoch} is not led by this broker "
                                     f"(leading epoch {self._leading_epoch})")
            entry = JournalEntry(self._start + len(self._entries), epoch, kind, topic,
                                 partition, base_offset, record_count, partitions, batch_bytes)
            return self._append_locked(entry)

    def append_replica(self, entry: JournalEntry) -> JournalEntry:
        """A follower's copy of the leader's entry (returned as stored, with its topic id).
        JournalGapError unless entry.index is `end`; JournalEpochError when its epoch is below
        the last one."""
        with self._lock:
            self._check_open()
            if entry.index != self._start + len(self._entries):
                raise JournalGapError(f"entry {entry.index} does not follow the journal end "
                                      f"{self._start + len(self._entries)}")
            return self._append_locked(entry)

    def _append_locked(self, entry: JournalEntry) -> JournalEntry:
        epochs = self._epochs
        last_epoch = epochs[-1][0] if epochs else 0
        if entry.epoch < last_epoch:
            raise JournalEpochError(f"entry {entry.index} of epoch {entry.epoch} after epoch "
                                    f"{last_epoch}")
        record = encode_entry(entry)
        self._write_locked(record)
        entry = identified(entry, self._incarnations)
        self._entries.append(entry)
        self._end = entry.index + 1
        self._positions.append(self._file_bytes)
        self._file_bytes += len(record)
        if not epochs or entry.epoch != last_epoch:
            self._epochs = (*epochs, (entry.epoch, entry.index))
        return entry

    def _write_locked(self, record: bytes) -> None:
        """One write; whatever part of a failed or short one reached the file is cut off, so
        the file never holds a torn record before a whole one. StorageFullError on a full
        disk."""
        try:
            with self._space.writing(self.path):
                written = os.write(self._fd, record)
        except BaseException:
            os.ftruncate(self._fd, self._file_bytes)
            raise
        if written != len(record):
            os.ftruncate(self._fd, self._file_bytes)
            # A regular file takes part of a write when the rest has no room: a full disk.
            with self._space.writing(self.path):
                raise OSError(errno.ENOSPC, f"{self.path}: short write ({written} of "
                              f"{len(record)} bytes)")

    # -- truncation, durability, lifetime ------------------------------------------------

    def truncate(self, end: int) -> None:
        """Drop every entry with index >= `end` (nothing when end >= `end`); fsynced."""
        if end < 0:
            raise ValueError(f"cannot truncate the journal to {end}")
        with self._lock:
            self._check_open()
            if end >= self._start + len(self._entries):
                return
            if end < self._start:
                raise JournalCompactedError(f"cannot truncate the journal to {end}: entries "
                                            f"below {self._start} are compacted (committed)",
                                            self._start, end)
            cut = end - self._start
            position = self._positions[cut]
            os.ftruncate(self._fd, position)
            os.fsync(self._fd)
            del self._entries[cut:]
            self._end = end
            del self._positions[cut:]
            self._incarnations = incarnations(self._snapshot, self._entries)
            self._file_bytes = position
            self._epochs = tuple(pair for pair in self._epochs if pair[1] < end)

    def compact(self, upto: int) -> bool:
        """Fold the entries below `upto` into the snapshot and rewrite the file without them
        (see the module docstring). The caller promises they are committed and applied, and
        that their partition bytes are on disk (synced) if they must survive a machine crash.
        False when there is nothing to fold (upto <= start); JournalCompactedError never
        (a lower `upto` is nothing to do); ValueError past `end`. StorageFullError (or another
        OSError) leaves the journal as it was."""
        with self._compact_lock:
            with self._lock:
                self._check_open()
                start, base = self._start, self._snapshot
                if upto <= start:
                    return False
                if upto > start + len(self._entries):
                    raise ValueError(f"cannot compact to {upto} past the journal end "
                                     f"{start + len(self._entries)}")
                folded = self._entries[:upto - start]
            # Outside the lock: committed entries never change (truncation stays above them).
            snapshot = advance(base, folded)
            with self._sync_lock, self._lock:
                self._check_open()
                assert self._start == start and self._end >= upto, "compaction raced a rewrite"
                cut = upto - start
                tail_from = self._positions[cut] if cut < len(self._entries) \
                    else self._file_bytes
                records = os.pread(self._fd, self._file_bytes - tail_from, tail_from) \
                    if self._file_bytes > tail_from else b""
                self._rewrite_locked(snapshot, records, self._entries[cut:], tail_from)
            return True

    def install(self, snapshot: Snapshot) -> None:
        """Replace the whole journal with `snapshot` and no entries (a follower behind its
        leader's snapshot: its entries are a prefix of the ones the snapshot folded). The
        caller made the data directory hold what the snapshot says first. JournalCompactedError
        when the snapshot ends below the journal's own start."""
        with self._compact_lock, self._sync_lock, self._lock:
            self._check_open()
            if snapshot.end < self._start:
                raise JournalCompactedError(f"snapshot ending at {snapshot.end} is older than "
                                            f"the journal's, at {self._start}", self._start,
                                            snapshot.end)
            self._rewrite_locked(snapshot, b"", [], self._file_bytes)

    def _rewrite_locked(self, snapshot: Snapshot, records: bytes,
                        entries: list[JournalEntry], tail_from: int) -> None:
        """Write the file anew (snapshot, then `records`: the held entries' records, which sat
        at `tail_from` in the old file) and adopt it."""
        head = file_head(snapshot)
        with self._space.writing(self.path):
            fd = write_file(self.path, head, records)
        os.close(self._fd)
        self._fd = fd
        shift = len(head) - tail_from
        positions = self._positions[len(self._positions) - len(entries):] if entries \
            else array("q")
        self._positions = array("q", (position + shift for position in positions))
        self._entries = list(entries)
        self._snapshot = snapshot
        self._start = snapshot.end
        self._end = snapshot.end + len(self._entries)
        self._records_start = len(head)
        self._file_bytes = len(head) + len(records)
        self._incarnations = incarnations(snapshot, self._entries)
        self._epochs = _epoch_cache(snapshot, self._entries)
        fsync_directory(self.path.parent)  # last: the new file is adopted whatever it says

    def flush(self) -> None:
        """fsync the file; appends go on meanwhile."""
        with self._sync_lock:
            with self._lock:
                self._check_open()
                fd = self._fd
            os.fsync(fd)

    def close(self) -> None:
        """Close the file (no fsync: call flush first). Idempotent; later calls other than
        the lock-free reads raise JournalClosedError."""
        with self._sync_lock, self._lock:
            if self._closed:
                return
            self._closed = True
            self._leading_epoch = None
            os.close(self._fd)

    def _check_open(self) -> None:
        if self._closed:
            raise JournalClosedError(f"{self.path} is closed")
