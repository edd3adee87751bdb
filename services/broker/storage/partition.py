"""PartitionLog: the segment list of one topic partition (Kafka's `Log`).

On disk: one directory holding `%020d.log` + `%020d.index` + `%020d.timeindex` per segment
(segment.py, offset_index.py and time_index.py give the formats) and `%020d.snapshot`
producer-table snapshots (producer_state.py). Quarantined files end in `.unreadable.<ns>`;
`*.tmp` files are leftovers of an interrupted segment, index or snapshot creation and are
removed on open.

Invariants:
- Segments are ordered by base offset and contiguous: each one's base offset is the previous
  one's next offset; `log_start_offset` is the first base, `log_end_offset` (LEO) the next
  offset to assign. Offsets are dense.
- Only the last segment is active (mapped, preallocated); the others are sealed and trimmed.
  Retention (and `delete_segments_below`) deletes whole segments from the front, never the
  active one.
- The producer table equals the snapshot at `log_start_offset` (empty when there is none)
  followed by every batch header of the log; it is rebuilt that way on open and after
  truncation, and kept as it is (like Kafka) when retention deletes old segments.
- Snapshots lie within [log_start_offset, LEO] and each holds the table as it was at its
  offset. A roll writes one at the new segment's base offset, before creating the segment.
  Retention keeps (writing it first when missing) the one at the new log start and deletes
  the older ones; truncation deletes those above the new LEO (before cutting any segment);
  `restart_at` and truncation below the log start delete them all (first).
- The leader epoch cache (leader_epochs.py) holds, for every epoch of the batches in
  [log_start_offset, LEO), the first offset of it: fed by recovery's scan and every append, cut
  with the log's end, trimmed with its start, emptied by `restart_at`.

Recovery on open: every segment is scanned and CRC-checked in order; the first invalid batch
ends the log (the segment holding it is cut there and every later segment is deleted, since
offsets must stay dense); a `.log` file that is not a Kaska segment (no magic, too short) is
renamed aside with a logged warning; indexes are checked and rebuilt when needed. The producer
table is loaded from the snapshot at the first segment's base offset (a missing or corrupt one
is skipped, the latter with a warning) and fed the batch headers seen on the way; snapshots
outside [log_start_offset, LEO] (left by a crash) are deleted.

Crash safety of emptying a log (`restart_at`, truncation below the log start): the snapshots
go first, then the new empty segment is created before the old ones are deleted, so recovery
finds either the old log (or a suffix of it) or the new one -- never an empty directory that
would restart at offset 0.

Thread-safety: one `threading.Lock` serialises appends (produce and replica, `on_append`
included), roll, truncation, restart, retention, flush and close, and with them every write or
delete of a snapshot file. `append_from` holds it while `fill` runs, so a slow producer
delays the other producers of the same partition (the server bounds each fill with a socket
timeout). Reads take no lock: they work on an immutable snapshot of the segment list and each
segment's published (next offset, end position), so a reader sees only committed batches,
concurrently with appends. `FileSlice`s keep their file open (see segment.py), so retention or
topic deletion while a slice is being sent never hands a reader a closed or reused descriptor.

Durability: an appended batch is in the page cache (it survives a SIGKILL of the broker) once
`append_from` returns. With `flush_interval_ms` set, the append that finds the last fsync at
least that old fsyncs every segment written since (0: every append); None never fsyncs
(Kafka's default), except in `flush()`. A partition with no append or truncation since its
last flush (or since it was opened) skips `flush()`: a broker holding thousands of idle
partitions shuts down in well under a second instead of syncing each of them. (A fresh empty
partition is not synced either: if a machine crash lost its new segment file, recovery simply
creates it again.) Snapshot files are fsynced only when `flush_interval_ms` is set; one torn
by a machine crash fails its CRC and is ignored.

`sync()` is replication's fsync (fsync policy `entry`, docs/replication.md), separate from the
flush schedule above: it fsyncs the segment files appended to since the last `sync()` (all of
them after an open: a SIGKILL may have left recovered bytes in the page cache only), and the
directory when the segment list changed, with the fsyncs themselves outside the lock, so
appends to the partition go on meanwhile. Truncations are not synced: bytes a machine crash
brings back past the journal are cut by `reconcile` at the next start.

Full disk (disk_space.py): every write that needs new blocks -- the reservation of a batch's
bytes in the active segment, a roll's snapshot and segment files, the new segment of a restart
-- raises StorageFullError before anything of it is visible: the append, roll or restart did
not happen (its partial files are removed) and the partition is as it was, so the next attempt
simply tries again. Reads never write and go on being served. An offset index entry with no
room is skipped (the index is sparse), so a stamped batch never fails after the fact.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from common.kaska.errors import CorruptBatchError, MessageTooLargeError, OffsetOutOfRangeError
from common.kaska.record_batch import HEADER_BYTES, BatchHeader, parse_header
from services.broker.storage.config import LogConfig
from services.broker.storage.disk_space import DiskSpace
from services.broker.storage.errors import (
    CorruptSegmentError,
    PartitionClosedError,
    ReplicaOffsetMismatchError,
    StorageFullError,
)
from services.broker.storage.leader_epochs import LeaderEpochCache
from services.broker.storage.log_start import (
    LOG_START_FILE,
    read_log_start,
    write_log_start,
)
from services.broker.storage.producer_state import (
    ProducerSnapshots,
    ProducerStateTable,
    is_snapshot_name,
    snapshot_path,
)
from services.broker.storage.segment import FileSlice, LogSegment, copy_slices, log_path
from services.broker.storage.time_index import time_index_path
from services.broker.storage.timestamps import offset_for_timestamp

__all__ = ["AppendResult", "FileSlice", "OnAppend", "PartitionLog", "StartMoved"]

log = logging.getLogger(__name__)

_SEGMENT_NAME_DIGITS = 20


# on_append(header, base_offset): see PartitionLog.append_from.
OnAppend = Callable[[BatchHeader, int], None]


@dataclass(frozen=True)
class AppendResult:
    base_offset: int
    record_count: int
    duplicate: bool  # True: the producer's retry; nothing stored, original base offset


@dataclass(frozen=True)
class StartMoved:
    """What `delete_records` did: the log start before and after, segments deleted."""

    previous: int
    start: int
    segments_deleted: int

    @property
    def records_deleted(self) -> int:
        """Offsets moved below the log start (offsets are dense: one record each)."""
        return self.start - self.previous


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class PartitionLog:
    """The log of one partition; opening it recovers the directory (created when missing)."""

    def __init__(self, directory: Path, config: LogConfig,
                 clock_ms: Callable[[], int] = monotonic_ms, space: DiskSpace | None = None):
        """`space`: the Log's DiskSpace (one per data directory, where full-disk episodes are
        counted); None makes one for this partition alone (tests)."""
        self.directory = Path(directory)
        self.config = config
        self._clock_ms = clock_ms
        self._space = space or DiskSpace(self.directory)
        self._lock = threading.Lock()
        self._closed = False
        self._producers = ProducerStateTable(config.producer_ids_max)
        self._epochs = LeaderEpochCache()  # fed by recovery's scan and every append
        self._snapshots = ProducerSnapshots(self.directory)
        self._unflushed: list[LogSegment] = []
        self._dirty = False  # appended or truncated since the last flush
        self._last_flush_ms = clock_ms()
        segments = self._recover()
        self._publish(segments)
        # What sync() has yet to fsync, and the segment list it last saw (None: never synced).
        self._unsynced: list[LogSegment] = list(segments)
        self._synced_bases: tuple[int, ...] | None = None
        self._leo = segments[-1].next_offset
        self._snapshots.delete_outside(segments[0].base_offset, self._leo)
        # The logical log start DeleteRecords set (persisted in LOG_START_FILE); the visible
        # log start is never below the first segment's base nor above the log end.
        self._start = read_log_start(self.directory)
        with self._lock:
            # A crash between persisting a start and deleting the segments below it.
            self._free_below_start_locked("delete records (recovered)")
            self._epochs.truncate_from_end(self._leo)
            self._epochs.truncate_from_start(self.log_start_offset)

    # -- state ---------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        """The first offset a reader may ask for: the first segment's base, or the start
        `delete_records` moved it to inside a segment (never above the log end)."""
        held = self._segments_snapshot()[1][0]
        return max(held, min(self._start, self._leo))

    @property
    def held_start_offset(self) -> int:
        """The first offset whose bytes are still on disk (the first segment's base): at or
        below `log_start_offset`. Replication copies whole batches from here."""
        return self._segments_snapshot()[1][0]

    @property
    def log_end_offset(self) -> int:
        """The next offset to assign."""
        return self._leo

    @property
    def size_bytes(self) -> int:
        return sum(segment.size_bytes for segment in self._view[0])

    @property
    def segment_count(self) -> int:
        return len(self._view[0])

    @property
    def active_segment_bytes(self) -> int:
        """Bytes used in the active (last) segment, its 16-byte header included."""
        return self._segments_snapshot()[0][-1].size_bytes

    @property
    def closed(self) -> bool:
        return self._closed

    def segment_base_offsets(self) -> tuple[int, ...]:
        return self._view[1]

    def end_offset_for_epoch(self, epoch: int, current_epoch: int | None = None
                             ) -> tuple[int, int]:
        """(epoch, end offset) of leader epoch `epoch` in this log, as OffsetForLeaderEpoch
        answers it (leader_epochs.py; `current_epoch`: the epoch its leader writes in now).
        Lock-free."""
        log_end_offset = self._leo  # first: an epoch appended meanwhile starts at or above it
        return self._epochs.end_offset_for(epoch, log_end_offset, current_epoch)

    def leader_epochs(self) -> tuple[tuple[int, int], ...]:
        """(epoch, first offset) of every leader epoch in the log, oldest first."""
        return self._epochs.entries()

    def last_sequence(self, producer_id: bytes) -> int | None:
        with self._lock:
            return self._producers.last_sequence(producer_id)

    def _publish(self, segments: list[LogSegment]) -> None:
        """Readers pick up the new list in one reference read."""
        self._view = (tuple(segments), tuple(s.base_offset for s in segments))

    def _segments_snapshot(self) -> tuple[tuple[LogSegment, ...], tuple[int, ...]]:
        view = self._view
        if self._closed or not view[0]:
            raise PartitionClosedError(f"partition {self.directory} is closed")
        return view

    def _check_open(self) -> None:
        if self._closed:
            raise PartitionClosedError(f"partition {self.directory} is closed")

    # -- appending -----------------------------------------------------------------------

    def append_from(self, total_bytes: int, fill: Callable[[memoryview], None],
                    leader_epoch: int = 0, on_append: OnAppend | None = None) -> AppendResult:
        """Reserve total_bytes (one whole batch as it came on the wire) in the active segment
        (rolling first if it does not fit), call fill(region) -- the server does
        sock.recv_into(region) in a loop here -- then validate the header and CRC in place,
        check the producer table, stamp base offset and epoch, and only then make it visible
        and advance log_end_offset. A CorruptBatchError / sequence error leaves nothing visible.
        An exception from fill (broken socket) leaves nothing visible and re-raises.
        `on_append(header, base_offset)` runs under the lock once the batch is valid and will be
        appended (never for a duplicate), before it is stamped and visible; if it raises, the
        batch is discarded. Replication writes its journal entry there, in the partition's
        own order, and refuses appends of a deposed leader.

        The partition lock is held while fill runs: other appends to this partition wait, so
        the caller must bound fill (socket timeout). Reads are not blocked.
        MessageTooLargeError / CorruptBatchError for a size out of bounds are raised before
        fill is called (the caller still has the batch bytes to skip)."""
        self._check_batch_size(total_bytes)
        with self._lock:
            self._check_open()
            return self._append_locked(total_bytes, fill, leader_epoch, on_append)

    def append(self, batch: bytes | memoryview, leader_epoch: int = 0,
               on_append: OnAppend | None = None) -> AppendResult:
        """Same through a copy (tests, internal topics)."""
        source = memoryview(batch).cast("B")

        def copy(region: memoryview) -> None:
            region[:] = source

        return self.append_from(source.nbytes, copy, leader_epoch, on_append)

    def append_replica(self, batch: bytes | memoryview,
                       on_append: OnAppend | None = None) -> AppendResult:
        """A batch copied byte for byte from the leader's log, already stamped: it must start
        at this log's end (else ReplicaOffsetMismatchError, nothing stored); it is size- and
        CRC-checked like a produce and keeps its offset and epoch. The producer table records
        it without the sequence check: a follower stores exactly what the leader stored (the
        leader already deduplicated). `on_append` as in append_from."""
        source = memoryview(batch).cast("B")
        self._check_batch_size(source.nbytes)
        stamped = parse_header(source)
        if stamped.total_bytes != source.nbytes:
            raise CorruptBatchError(f"replicated batch says {stamped.total_bytes} bytes, "
                                    f"carries {source.nbytes}")
        with self._lock:
            self._check_open()
            if stamped.base_offset != self._leo:
                raise ReplicaOffsetMismatchError(
                    f"{self.directory}: replicated batch at offset {stamped.base_offset}, "
                    f"log ends at {self._leo}")

            def copy(region: memoryview) -> None:
                region[:] = source

            return self._append_locked(source.nbytes, copy, stamped.leader_epoch, on_append,
                                       replica=True)

    def _check_batch_size(self, total_bytes: int) -> None:
        if total_bytes < HEADER_BYTES:
            raise CorruptBatchError(f"batch of {total_bytes} bytes is shorter than its header")
        if total_bytes > self.config.batch_bytes_max:
            raise MessageTooLargeError(f"batch of {total_bytes} bytes is over "
                                       f"batch_bytes_max {self.config.batch_bytes_max}")

    def _append_locked(self, total_bytes: int, fill: Callable[[memoryview], None],
                       leader_epoch: int, on_append: OnAppend | None = None,
                       replica: bool = False) -> AppendResult:
        """The one append path (produce and replica): reserve, fill, validate in place, ask the
        producer table (a replica skips the check), on_append, then stamp and publish."""
        segment = self._segment_for(total_bytes)
        region = segment.reserve(total_bytes)
        base_offset = self._leo
        try:
            fill(region)
            del region
            header = segment.validate_reservation()
            original = None if replica else self._producers.check(header)
            if original is None and on_append is not None:
                on_append(header, base_offset)
        except BaseException:
            segment.discard()
            raise
        if original is not None:
            segment.discard()
            return AppendResult(original.base_offset, original.record_count, duplicate=True)
        self._dirty = True
        segment.commit(header, base_offset, leader_epoch)
        self._epochs.assign(leader_epoch, base_offset)
        self._producers.record(header, base_offset)
        self._leo = base_offset + header.record_count
        self._note_written(segment)
        self._space.written()
        return AppendResult(base_offset, header.record_count, duplicate=False)

    def _segment_for(self, total_bytes: int) -> LogSegment:
        active = self._view[0][-1]
        roll_bytes = self.config.segment_roll_bytes
        if active.fits(total_bytes) and (
                roll_bytes is None or active.is_empty
                or active.end_position + total_bytes <= roll_bytes):
            return active
        assert not active.is_empty, "config guarantees an empty segment holds any batch"
        return self._roll_locked()

    def roll(self) -> bool:
        """Seal the active segment now and start the next one at log_end_offset, so that
        retention can delete everything below this point (`__offsets` compaction). False when
        the active segment is empty (nothing to roll)."""
        with self._lock:
            self._check_open()
            if self._view[0][-1].is_empty:
                return False
            self._roll_locked()
            return True

    def _roll_locked(self) -> LogSegment:
        segments = list(self._view[0])
        active = segments[-1]
        durable = self.config.flush_interval_ms is not None
        # The snapshot before the segment: a crash in between -- or a full disk refusing the
        # segment -- leaves a snapshot at the log end, which is still the table at that offset.
        self._write_snapshot_locked(self._leo, self._producers, durable)
        fresh = LogSegment.create(self.directory, self._leo, self.config, self._space)
        if durable:
            active.flush()  # while its index descriptor is still open
            self._forget(active)
            fsync_directory(self.directory)
        active.seal()
        segments.append(fresh)
        self._publish(segments)
        return fresh

    def _write_snapshot_locked(self, offset: int, table: ProducerStateTable,
                               durable: bool) -> None:
        with self._space.writing(snapshot_path(self.directory, offset)):
            self._snapshots.write(offset, table, durable)

    def _note_written(self, segment: LogSegment) -> None:
        # Kept whatever the flush schedule: each live segment at most once (see _forget); the
        # membership test runs only when the append moved to another segment (a roll).
        if (not self._unsynced or self._unsynced[-1] is not segment) \
                and all(s is not segment for s in self._unsynced):
            self._unsynced.append(segment)
        if self.config.flush_interval_ms is None:
            return
        if not self._unflushed or self._unflushed[-1] is not segment:
            self._unflushed.append(segment)
        if self._clock_ms() - self._last_flush_ms >= self.config.flush_interval_ms:
            self._flush_locked()

    # -- reading (lock-free) -------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, upto_offset: int | None = None,
             below_start: bool = False) -> list[FileSlice]:
        """Whole batches starting with the one holding `offset`, up to max_bytes -- but at least
        one whole batch when offset < end (as Kafka, so a consumer always progresses); never
        past upto_offset (the high watermark later). offset == log_end_offset -> [].
        offset outside [log_start_offset, log_end_offset] -> OffsetOutOfRangeError;
        `below_start`: from `held_start_offset` instead (replication copies the bytes a
        replica must hold, whole batches, whatever consumers may read).
        The first batch may start before `offset`; a batch holding upto_offset is left out."""
        end = self._leo
        segments, bases = self._segments_snapshot()
        low = bases[0] if below_start else max(bases[0], min(self._start, end))
        if not low <= offset <= end:
            raise OffsetOutOfRangeError(f"offset {offset} outside [{low}, {end}]")
        limit = end if upto_offset is None else min(upto_offset, end)
        slices: list[FileSlice] = []
        remaining = max_bytes
        i = bisect_right(bases, offset) - 1
        while i < len(segments) and offset < limit and (remaining > 0 or not slices):
            segment = segments[i]
            if offset >= segment.next_offset:
                i += 1
                continue
            got = segment.read_slice(offset, remaining, limit, at_least_one=not slices)
            if got is None:
                break
            piece, offset = got
            slices.append(piece)
            remaining -= piece.nbytes
            if offset < segment.next_offset:
                break  # stopped inside this segment: at max_bytes or the limit
            i += 1
        return slices

    def offset_for_timestamp(self, timestamp_ms: int, upto_offset: int | None = None
                             ) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record from the log start, in the batches wholly
        below `upto_offset` (the high watermark), stamped at or after `timestamp_ms`; None
        when there is none (timestamps.py). Lock-free."""
        end = self._leo
        segments, _ = self._segments_snapshot()
        limit = end if upto_offset is None else min(upto_offset, end)
        return offset_for_timestamp(segments, self.log_start_offset, limit, timestamp_ms)

    def read_bytes(self, offset: int, max_bytes: int, upto_offset: int | None = None,
                   below_start: bool = False) -> bytes:
        """Same, copied (tests, replication)."""
        return copy_slices(self.read(offset, max_bytes, upto_offset, below_start))

    # -- truncation and retention --------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove every batch holding an offset >= `offset` (a batch that straddles it goes
        whole, so log_end_offset may end below `offset`). Below log_start_offset the log is
        emptied and restarts at `offset`. Readers must stay below the truncation point (the
        high watermark); a racing reader gets a short answer, never a crash."""
        if offset < 0:
            raise OffsetOutOfRangeError(f"cannot truncate to negative offset {offset}")
        with self._lock:
            self._check_open()
            if offset >= self._leo:
                return
            self._dirty = True
            segments = list(self._view[0])
            if offset < segments[0].base_offset:
                self._restart_locked(segments, offset)
            else:
                self._truncate_within_locked(segments, offset)
                self._rebuild_producers_locked()
            self._epochs.truncate_from_end(self._leo)
            if self._start > self._leo:
                # Cut below the logical start (Kafka restarts the log at the target then): the
                # start follows the end down, so later appends are not hidden behind it.
                self._persist_start_locked(self._leo)

    def _truncate_within_locked(self, segments: list[LogSegment], offset: int) -> None:
        i = bisect_right([s.base_offset for s in segments], offset) - 1
        segment = segments[i]
        located = segment.locate(offset)
        assert located is not None, "offset < LEO lies in a committed batch"
        position, batch_base = located
        # Snapshots first: a crash before the cut then leaves the log whole with fewer
        # snapshots, never a snapshot above the end that a later roll could be confused with.
        self._snapshots.delete_outside(segments[0].base_offset, batch_base)
        for later in segments[i + 1:]:
            self._forget(later)
            later.delete()
        segment.truncate_to(position, batch_base)
        self._publish(segments[:i + 1])
        self._leo = batch_base

    def _rebuild_producers_locked(self) -> None:
        segments = self._view[0]
        self._snapshots.load_into(self._producers, segments[0].base_offset)
        for segment in segments:
            for header in segment.iter_headers():
                self._producers.load(header)

    def restart_at(self, offset: int) -> None:
        """Empty the partition and start it again at `offset`, so log_start_offset ==
        log_end_offset == offset (a follower whose leader no longer has the bytes before
        `offset`). Only forward: ReplicaOffsetMismatchError when the log ends after `offset`.
        Crash-safe like truncation below the log start (same code)."""
        with self._lock:
            self._check_open()
            if offset < self._leo:
                raise ReplicaOffsetMismatchError(f"{self.directory}: cannot restart at {offset}, "
                                                 f"the log already ends at {self._leo}")
            if offset == self._leo and self._view[0][0].base_offset == offset:
                return
            self._dirty = True
            self._restart_locked(list(self._view[0]), offset)

    def _restart_locked(self, segments: list[LogSegment], offset: int) -> None:
        """Replace every segment by one empty segment at `offset` (order: see the module
        docstring). `offset` lies below every segment or at/after the log end."""
        self._snapshots.delete_all()
        last = segments[-1]
        if last.base_offset == offset:  # already an empty active segment there: keep it
            assert last.is_empty
            fresh, doomed = last, segments[:-1]
        else:
            # May be refused (full disk): the old segments then stay, and so does the table
            # in memory, which still describes them.
            fresh = LogSegment.create(self.directory, offset, self.config, self._space)
            doomed = segments
        self._producers.clear()
        self._epochs.clear()
        self._publish([fresh])
        self._leo = offset
        for segment in doomed:
            self._forget(segment)
            segment.delete()

    def reconfigure(self, config: LogConfig) -> None:
        """Adopt a topic's own settings (cluster/topic_configs.py): retention and the segment
        roll size apply from the next append and retention pass; the other bounds must be
        the broker's (ValueError otherwise: they shape files already written)."""
        fixed = ("segment_bytes_max", "index_interval_bytes", "batch_bytes_max",
                 "producer_ids_max", "reserve_ahead_bytes", "flush_interval_ms")
        changed = [name for name in fixed if getattr(config, name) != getattr(self.config, name)]
        if changed:
            raise ValueError(f"{self.directory}: only retention and the roll size change per "
                             f"topic, not {', '.join(changed)}")
        with self._lock:
            self.config = config

    def apply_retention(self, now_ms: int, upto_offset: int | None = None) -> int:
        """Delete whole segments from the front while the partition stays at or above
        retention_bytes without them, or while their newest batch timestamp is older than
        retention_ms at wall-clock `now_ms`; never the active segment, and never a segment
        holding an offset at or above `upto_offset` (the high watermark: a follower may still
        need it). Segments deleted."""
        with self._lock:
            self._check_open()
            segments = list(self._view[0])
            total_bytes = sum(segment.size_bytes for segment in segments)
            doomed = 0
            for segment in segments[:-1]:
                if upto_offset is not None and segment.next_offset > upto_offset:
                    break
                if not self._expired(segment, total_bytes, now_ms):
                    break
                total_bytes -= segment.size_bytes
                doomed += 1
            return self._delete_front_locked(segments, doomed, "retention")

    def delete_segments_below(self, offset: int) -> int:
        """Delete every segment whose offsets all lie below `offset`, never the active one,
        whatever the retention settings (`__offsets` compaction: everything below its latest
        snapshot batch is superseded by it). Segments deleted."""
        with self._lock:
            self._check_open()
            segments = list(self._view[0])
            doomed = 0
            while doomed < len(segments) - 1 and segments[doomed].next_offset <= offset:
                doomed += 1
            return self._delete_front_locked(segments, doomed, "compaction")

    def delete_records(self, offset: int) -> StartMoved:
        """Move the log start forward to `offset` (Kafka's DeleteRecords): readers get
        OffsetOutOfRangeError below it from now on, and every segment whose offsets all lie
        below it is deleted (the active one too, rolled first, when `offset` is the log end).
        The new start is persisted (fsynced) before any segment goes, so a crash never shows
        the records again: a restart deletes what was left. At or below the current start:
        nothing changes. Above the log end: OffsetOutOfRangeError, nothing changes. The producer
        table is kept (a snapshot at the new first segment, as retention keeps it), so a retry
        of a batch below the start is still recognised."""
        with self._lock:
            self._check_open()
            previous = max(self._view[1][0], min(self._start, self._leo))
            if offset <= previous:
                return StartMoved(previous, previous, 0)
            if offset > self._leo:
                raise OffsetOutOfRangeError(f"{self.directory}: cannot move the log start to "
                                            f"{offset}, the log ends at {self._leo}")
            self._persist_start_locked(offset)
            self._epochs.truncate_from_start(offset)
            if offset == self._leo and not self._view[0][-1].is_empty:
                self._dirty = True
                try:
                    self._roll_locked()  # so the active segment's bytes can go too
                except StorageFullError as exc:
                    log.warning("%s: no room to roll at the new log start %d (%s); the "
                                "active segment stays until the next roll", self.directory,
                                offset, exc)
            return StartMoved(previous, offset,
                              self._free_below_start_locked("delete records"))

    def _persist_start_locked(self, offset: int) -> None:
        with self._space.writing(self.directory / LOG_START_FILE):
            write_log_start(self.directory, offset)
        self._start = offset

    def _free_below_start_locked(self, why: str) -> int:
        """Delete the segments wholly below the (persisted) start; segments deleted. The start
        already hides them, so a full disk refusing the producer snapshot this needs
        (`_ensure_snapshot_locked`) only postpones it to the next move or open -- an open
        never fails for it."""
        segments = list(self._view[0])
        doomed = 0
        while doomed < len(segments) - 1 and segments[doomed].next_offset <= self._start:
            doomed += 1
        try:
            return self._delete_front_locked(segments, doomed, why)
        except StorageFullError as exc:
            log.warning("%s: %s: segments below %d kept for now: %s", self.directory, why,
                        self._start, exc)
            return 0

    def _delete_front_locked(self, segments: list[LogSegment], doomed: int, why: str) -> int:
        if not doomed:
            return 0
        start = segments[doomed].base_offset
        self._ensure_snapshot_locked(segments, doomed)
        self._publish(segments[doomed:])
        self._epochs.truncate_from_start(self.log_start_offset)
        for segment in segments[:doomed]:
            self._forget(segment)
            segment.delete()
        self._snapshots.delete_outside(start, self._leo)
        log.info("%s: %s deleted %d segment(s); log starts at %d", self.directory, why, doomed,
                 start)
        return doomed

    def _ensure_snapshot_locked(self, segments: list[LogSegment], doomed: int) -> None:
        """Make sure the new log start carries the producer table at it, or a restart would
        forget producers whose batches all lie in the doomed segments. Rolls write it; a log
        from before snapshots (or one whose file was lost) gets it rebuilt here from the old
        start's snapshot and the doomed segments' headers."""
        start = segments[doomed].base_offset
        table = ProducerStateTable(self.config.producer_ids_max)
        if self._snapshots.load_into(table, start):
            return
        self._snapshots.load_into(table, segments[0].base_offset)
        for segment in segments[:doomed]:
            for header in segment.iter_headers():
                table.load(header)
        durable = self.config.flush_interval_ms is not None
        self._write_snapshot_locked(start, table, durable)
        if durable:
            fsync_directory(self.directory)

    def _expired(self, segment: LogSegment, total_bytes: int, now_ms: int) -> bool:
        config = self.config
        if (config.retention_bytes is not None
                and total_bytes - segment.size_bytes >= config.retention_bytes):
            return True
        return (config.retention_ms is not None and segment.max_timestamp_ms is not None
                and now_ms - segment.max_timestamp_ms > config.retention_ms)

    def _forget(self, segment: LogSegment) -> None:
        """A segment leaves the log (deleted): nothing of it needs an fsync any more."""
        self._unflushed = [s for s in self._unflushed if s is not segment]
        self._unsynced = [s for s in self._unsynced if s is not segment]

    # -- durability and lifetime ---------------------------------------------------------

    def flush(self) -> None:
        """fsync every segment written since the last flush, and the directory; nothing when
        nothing was written."""
        with self._lock:
            self._check_open()
            self._flush_locked()

    def _flush_locked(self) -> None:
        if not self._dirty:
            return
        for segment in self._unflushed:
            segment.flush()
        active = self._view[0][-1]
        if active not in self._unflushed:
            active.flush()
        fsync_directory(self.directory)
        self._unflushed = []
        self._dirty = False
        self._last_flush_ms = self._clock_ms()

    def sync(self) -> int:
        """fsync every segment appended to since the last sync (and the directory when the
        segment list changed since); returns the number of files fsynced. Everything appended
        before the call is durable when it returns. The fsyncs run outside the partition lock:
        a segment object keeps its descriptor open (segment.py), even once sealed or deleted.
        On an OSError the segments stay due, so a later sync tries them again."""
        with self._lock:
            self._check_open()
            due, self._unsynced = self._unsynced, []
            bases = self._view[1]
            directory_changed = bases != self._synced_bases
        try:
            for segment in due:
                # fsync on the descriptor also writes back pages dirtied through the map
                # (Linux: one page cache), so the active segment needs no msync of its map.
                os.fsync(segment.fd)
            if directory_changed:
                fsync_directory(self.directory)
        except OSError:
            with self._lock:
                self._unsynced = [*due, *(s for s in self._unsynced if s not in due)]
            raise
        with self._lock:
            self._synced_bases = bases
        return len(due) + int(directory_changed)

    def close(self) -> None:
        """Unmap and close; readers still holding slices keep their files until done.
        Idempotent. Later calls raise PartitionClosedError."""
        with self._lock:
            if self._closed:
                return
            if self.config.flush_interval_ms is not None:
                self._flush_locked()
            self._closed = True
            for segment in self._view[0]:
                segment.close()
            self._view = ((), ())
            # Their descriptors close with the last holder: these lists must not be one.
            self._unsynced = []
            self._unflushed = []

    # -- recovery ------------------------------------------------------------------------

    def _recover(self) -> list[LogSegment]:
        self.directory.mkdir(parents=True, exist_ok=True)
        bases = self._segment_files()
        segments: list[LogSegment] = []
        for n, base_offset in enumerate(bases):
            if segments and base_offset != segments[-1].next_offset:
                self._drop_after_gap(segments[-1].next_offset, bases[n:])
                break
            if not segments:
                # The table starts at the first segment that opens; a quarantined one fed no
                # header (its header check fails before the scan), so the next starts over.
                self._snapshots.load_into(self._producers, base_offset)
            try:
                segment = LogSegment.open(self.directory, base_offset, self.config,
                                          on_batch=self._recovered_batch, space=self._space)
            except CorruptSegmentError as exc:
                self._quarantine(base_offset, exc)
                continue
            segments.append(segment)
        if not segments:
            self._producers.clear()
            segments.append(LogSegment.create(self.directory, 0, self.config, self._space))
            return segments
        for segment in segments[:-1]:
            segment.seal()
        segments[-1].activate()
        return segments

    def _recovered_batch(self, header: BatchHeader) -> None:
        self._producers.load(header)
        self._epochs.assign(header.leader_epoch, header.base_offset)

    def _segment_files(self) -> list[int]:
        """Base offsets of the `.log` files, sorted; removes leftovers and orphan indexes."""
        bases: set[int] = set()
        index_bases: dict[int, list[Path]] = {}
        for path in self.directory.iterdir():
            if path.is_dir():
                log.warning("%s: a directory among segment files; ignored", path)
                continue
            stem, suffix = path.stem, path.suffix
            named = len(stem) == _SEGMENT_NAME_DIGITS and stem.isdigit() and stem.isascii()
            if suffix == ".tmp":
                path.unlink()
            elif suffix == ".log" and named:
                bases.add(int(stem))
            elif suffix in (".index", ".timeindex") and named:
                index_bases.setdefault(int(stem), []).append(path)
            elif is_snapshot_name(path) or path.name == LOG_START_FILE:
                continue  # ProducerSnapshots' files, the persisted log start
            elif ".unreadable." not in path.name:
                log.warning("%s: not a segment file; ignored", path)
        for base_offset, paths in index_bases.items():
            if base_offset not in bases:
                for path in paths:
                    path.unlink()
        return sorted(bases)

    def _quarantine(self, base_offset: int, exc: CorruptSegmentError) -> None:
        path = log_path(self.directory, base_offset)
        aside = path.with_name(f"{path.name}.unreadable.{time.time_ns()}")
        log.warning("%s; skipped and renamed to %s", exc, aside.name)
        os.replace(path, aside)
        path.with_suffix(".index").unlink(missing_ok=True)
        time_index_path(self.directory, base_offset).unlink(missing_ok=True)

    def _drop_after_gap(self, expected_offset: int, bases: list[int]) -> None:
        log.warning("%s: the log ends at offset %d but a segment starts at %d; deleting the "
                    "%d segment(s) after the gap so offsets stay dense", self.directory,
                    expected_offset, bases[0], len(bases))
        for base_offset in bases:
            path = log_path(self.directory, base_offset)
            path.unlink()
            path.with_suffix(".index").unlink(missing_ok=True)
            time_index_path(self.directory, base_offset).unlink(missing_ok=True)


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
