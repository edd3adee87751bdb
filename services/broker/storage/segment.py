"""LogSegment: one log file plus its offset index and time index (Kafka's LogSegment).

File format (`%020d.log`, named by the base offset of its first batch), big-endian:

    0   4  magic            b"KASK"
    4   2  format_version   SEGMENT_FORMAT_VERSION
    6   2  reserved         0
    8   8  base_offset      i64, equal to the number in the file name
    16  .. record batches back to back, exactly as they came on the wire (record_batch.py),
           each stamped with its base offset and leader epoch; then zeros to the end of file

The active (last) segment is preallocated with `ftruncate` to `segment_bytes_max` (a sparse
file) and mapped read/write with `mmap`; producers' batches are received straight into the map
(`reserve` → fill → `validate_reservation` → `commit`). Storing into a sparse page the file
system cannot back kills the process with SIGBUS, so `reserve` first backs the batch's bytes
with real blocks (`posix_fallocate` through disk_space.py, `reserve_ahead_bytes` beyond them so
most batches reserve nothing): a full disk fails the append with StorageFullError, before
anything is written. A sealed segment has no map and is trimmed to its used size (which gives
the unused reservation back). Readers never touch the map: they get `FileSlice`s for
`os.sendfile` or copy with `os.pread`, both through the file descriptor (one page cache, so
writes through the map are visible to them).

Invariants:
- The committed data is `[DATA_START, end_position)`; batches in it are contiguous, pass their
  CRC, and have base offsets `base_offset, ...` dense up to `next_offset`.
- Bytes beyond `end_position` are zero, except during a reservation. Rejected or abandoned
  reservations are zeroed again; recovery cuts the file at the end of the valid data and
  re-extends it (`ftruncate` down, then up), which zeroes any torn tail atomically. A batch
  never becomes valid on disk before `commit` stamps its offset: right after the fill its base
  offset is overwritten with -1, which recovery never accepts.
- `(next_offset, end_position)` is published as one tuple, after the batch is stamped and
  indexed, so a lock-free reader sees whole committed batches only.
- Nothing is stored through the map at or beyond `_reserved_end` (bytes backed by real blocks).
- `max_timestamp_ms` is the largest batch timestamp (header `timestamp_ms`) of the committed
  batches and `max_timestamp_offset` the base offset of the first batch holding it; the time
  index (time_index.py) gets an entry (that pair) wherever the offset index is due one and the
  largest timestamp grew since its last entry. A Kafka batch is indexed by its header's
  timestamp, its first record's, not by its largest record timestamp as Kafka's brokers index
  it: that would take a walk over every record of every batch on append, replication and
  recovery, which the produce path's C loop budget cannot pay; the lookup by timestamp
  (timestamps.py) looks into the batch before the first one at or after the target instead.

Thread-safety: everything that writes (reserve, validate_reservation, commit, discard,
truncate_to, activate, seal, flush, close, delete) runs under the owning partition's lock.
`read_slice`, `read_bytes`, `locate` and the properties are lock-free and may run concurrently
with them.

File descriptor lifetime: the descriptor lives in a `SegmentFile` that every `FileSlice` made
from it references; it is closed (by `weakref.finalize`) only when the segment object and every
slice are gone. A segment deleted by retention while a slice is being sent therefore keeps
serving the (unlinked) file until that send finishes; the number is never reused under a reader.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import struct
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from common.kaska.errors import CorruptBatchError
from common.kaska.kafka_compression import CODEC_NONE, KAFKA_RECORD_BYTES_MIN, codec_of
from common.kaska.record_batch import (
    HEADER_BYTES,
    LENGTH_FIELD_END,
    RECORD_LENGTH_BYTES,
    BatchHeader,
    parse_header,
    stamp,
    validate,
)
from services.broker.storage.config import POSITION_MAX, SEGMENT_HEADER_BYTES, LogConfig
from services.broker.storage.disk_space import DiskSpace
from services.broker.storage.errors import (
    CorruptIndexError,
    CorruptSegmentError,
    StorageFullError,
)
from services.broker.storage.offset_index import (
    ENTRY_BYTES,
    RELATIVE_OFFSET_MAX,
    OffsetIndex,
    index_path,
)
from services.broker.storage.time_index import TimeIndex, time_index_path

log = logging.getLogger(__name__)

SEGMENT_MAGIC = b"KASK"
SEGMENT_FORMAT_VERSION = 1
DATA_START = SEGMENT_HEADER_BYTES
POISON_OFFSET = -1  # base offset of a filled but uncommitted batch; never valid on recovery
_SEGMENT_HEADER = struct.Struct(">4sHHq")
_HEAD = struct.Struct(">qIiIHHI")  # batch header up to record_count: what a walk needs
_OFFSET_FIELD = struct.Struct(">q")
_ZEROS = bytes(1 << 20)
assert _SEGMENT_HEADER.size == SEGMENT_HEADER_BYTES


def log_path(directory: Path, base_offset: int) -> Path:
    return directory / f"{base_offset:020d}.log"


def records_max(header: BatchHeader) -> int:
    """Most records a batch can hold; lets the broker bound a batch's record count without
    parsing its records. Each needs its 4-byte length; in a compressed Kafka batch
    (common/kaska/kafka_compression.py) each inflates to at least KAFKA_RECORD_BYTES_MIN, and
    no broker inflates a batch past the largest segment (the bound is the same for every
    config, so that recovery never refuses what an older config accepted)."""
    if codec_of(header.attributes) != CODEC_NONE:
        return POSITION_MAX // KAFKA_RECORD_BYTES_MIN
    return (header.batch_length - (HEADER_BYTES - LENGTH_FIELD_END)) // RECORD_LENGTH_BYTES


class SegmentFile:
    """An open log file descriptor, closed when its last holder (segment or slice) is gone."""

    __slots__ = ("fd", "_finalizer", "__weakref__")

    def __init__(self, fd: int):
        self.fd = fd
        self._finalizer = weakref.finalize(self, os.close, fd)


@dataclass(frozen=True)
class FileSlice:
    """Bytes of whole batches, ready for os.sendfile(sock_fd, fd, position, nbytes).

    Keep the slice alive until the send is done: `owner` keeps `fd` open (see LogSegment).
    A slice of a segment truncated meanwhile (replication, never below the high watermark) may
    hit end of file early: sendfile then sends fewer bytes, which the caller must treat as the
    end of the answer."""

    fd: int
    position: int
    nbytes: int
    owner: object = field(default=None, compare=False, repr=False)


def copy_slices(slices: list[FileSlice]) -> bytes:
    """The bytes of `slices`, read into memory (for callers that must look at them)."""
    return b"".join(os.pread(piece.fd, piece.nbytes, piece.position) for piece in slices)


@dataclass(frozen=True, slots=True)
class _Head:
    """The fields of a batch header that a walk over the file needs."""

    position: int
    base_offset: int
    total_bytes: int
    record_count: int

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.record_count

    @property
    def end(self) -> int:
        return self.position + self.total_bytes


@dataclass
class _Scan:
    """What recovery learned from one pass over a log file."""

    end_position: int = DATA_START
    next_offset: int = 0
    max_timestamp_ms: int | None = None
    max_timestamp_offset: int | None = None
    rebuilt_index: list[tuple[int, int]] = field(default_factory=list)
    rebuilt_time_index: list[tuple[int, int]] = field(default_factory=list)  # (ts, relative)
    bytes_since_index: int = 0  # as the rebuilt index counts them
    kept_index: list[tuple[int, int]] | None = None  # stored entries that passed; None: rebuild
    stop_reason: str | None = None  # None: clean end (zeros or end of file)


class LogSegment:
    """One segment; see the module docstring for the file format and invariants."""

    def __init__(self, directory: Path, base_offset: int, config: LogConfig, fd: int,
                 index: OffsetIndex, space: DiskSpace | None = None,
                 time_index: TimeIndex | None = None):
        self.directory = directory
        self.base_offset = base_offset
        self.config = config
        self.path = log_path(directory, base_offset)
        self._file = SegmentFile(fd)
        self._index = index
        self._time_index = time_index or TimeIndex(time_index_path(directory, base_offset),
                                                   base_offset)
        self._space = space or DiskSpace(directory)
        self._mm: mmap.mmap | None = None
        self._reserved_end = DATA_START  # bytes of the active file backed by real blocks
        self._committed = (base_offset, DATA_START)
        self._bytes_since_index = 0
        self._reservation: tuple[int, int, memoryview, memoryview] | None = None
        self.max_timestamp_ms: int | None = None
        self.max_timestamp_offset: int | None = None

    # -- creation and recovery -----------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, base_offset: int, config: LogConfig,
               space: DiskSpace | None = None) -> LogSegment:
        """A new, empty, active segment. Built under a temporary name and renamed into place,
        so a `.log` file always carries its header. StorageFullError (nothing left behind)
        when the file system has no room for the files."""
        path = log_path(directory, base_offset)
        tmp = path.with_name(path.name + ".tmp")
        index_file = index_path(directory, base_offset)
        time_file = time_index_path(directory, base_offset)
        space = space or DiskSpace(directory)
        fd = -1
        try:
            with space.writing(path):
                # The indexes first: a crash before the rename leaves orphan indexes (removed
                # on open) rather than a log without them.
                index = OffsetIndex.rewrite(index_file, base_offset, [])
                time_index = TimeIndex.rewrite(time_file, base_offset, [])
                fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
                os.pwrite(fd, _SEGMENT_HEADER.pack(SEGMENT_MAGIC, SEGMENT_FORMAT_VERSION, 0,
                                                   base_offset), 0)
            os.replace(tmp, path)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            # Nothing names these files yet; on a full disk their blocks are wanted back now.
            tmp.unlink(missing_ok=True)
            index_file.unlink(missing_ok=True)
            time_file.unlink(missing_ok=True)
            raise
        segment = cls(directory, base_offset, config, fd, index, space, time_index)
        segment.activate()
        return segment

    @classmethod
    def open(cls, directory: Path, base_offset: int, config: LogConfig,
             on_batch: Callable[[BatchHeader], None] | None = None,
             space: DiskSpace | None = None) -> LogSegment:
        """Recover an existing segment: check the header, scan and CRC-check every batch, stop
        at the first invalid one (the caller activates or seals the result, which cuts the file
        there), and keep, trim or rebuild the index. `on_batch` sees every valid header in
        order. CorruptSegmentError when the file is not a Kaska segment."""
        path = log_path(directory, base_offset)
        fd = os.open(path, os.O_RDWR)
        try:
            scan = _recover(fd, path, base_offset, config, on_batch)
        except BaseException:
            os.close(fd)
            raise
        if scan.stop_reason is not None:
            log.warning("%s: valid data ends at byte %d (%s); the rest is cut", path,
                        scan.end_position, scan.stop_reason)
        space = space or DiskSpace(directory)
        index = _recovered_index(directory, base_offset, scan, space)
        time_index = _recovered_time_index(directory, base_offset, scan, space)
        segment = cls(directory, base_offset, config, fd, index, space, time_index)
        segment._committed = (scan.next_offset, scan.end_position)
        segment._bytes_since_index = scan.bytes_since_index
        segment.max_timestamp_ms = scan.max_timestamp_ms
        segment.max_timestamp_offset = scan.max_timestamp_offset
        return segment

    # -- state ---------------------------------------------------------------------------

    @property
    def next_offset(self) -> int:
        return self._committed[0]

    @property
    def end_position(self) -> int:
        return self._committed[1]

    @property
    def size_bytes(self) -> int:
        return self._committed[1]

    @property
    def is_empty(self) -> bool:
        return self._committed[0] == self.base_offset

    @property
    def active(self) -> bool:
        return self._mm is not None

    @property
    def fd(self) -> int:
        return self._file.fd

    def activate(self) -> None:
        """Make this the segment appends go to: cut the file at the committed end (zeroing
        whatever lay beyond), extend it to segment_bytes_max again, and map it. Only the
        committed bytes keep their blocks; appends reserve the rest as they go. Needs no new
        blocks, so it works on a full disk."""
        assert self._mm is None
        end = self.end_position
        size = max(self.config.segment_bytes_max, end)
        os.ftruncate(self.fd, end)
        os.ftruncate(self.fd, size)
        self._reserved_end = end
        self._mm = mmap.mmap(self.fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)

    def seal(self) -> None:
        """No more appends: unmap, trim the file to its used size, release the index file."""
        self._close_map()
        os.ftruncate(self.fd, self.end_position)
        self._index.close()
        self._time_index.close()

    def fits(self, total_bytes: int) -> bool:
        """Whether a batch of total_bytes can be appended here without rolling."""
        assert self._mm is not None
        return (self.end_position + total_bytes <= len(self._mm)
                and self.next_offset - self.base_offset <= RELATIVE_OFFSET_MAX)

    # -- the append path (under the partition lock) ---------------------------------------

    def reserve(self, total_bytes: int) -> memoryview:
        """The writable region of the map where the next batch goes; nothing is visible until
        commit, and discard wipes it again. StorageFullError (no reservation open) when the
        file system cannot back the region with blocks."""
        assert self._mm is not None and self._reservation is None
        position = self.end_position
        assert position + total_bytes <= len(self._mm)
        self._reserve_blocks(position + total_bytes)
        whole = memoryview(self._mm)
        region = whole[position:position + total_bytes]
        self._reservation = (position, total_bytes, whole, region)
        return region

    def _reserve_blocks(self, end: int) -> None:
        """Back the map up to `end` with real blocks before anything is stored there (SIGBUS
        otherwise, on a full disk), reserving up to reserve_ahead_bytes beyond it."""
        assert self._mm is not None
        start = self._reserved_end
        if end <= start:
            return
        ahead_bytes = max(0, min(self.config.reserve_ahead_bytes, len(self._mm) - end))
        self._reserved_end = start + self._space.reserve(self.fd, start, end - start,
                                                         self.path, ahead_bytes)

    def validate_reservation(self) -> BatchHeader:
        """Poison the filled batch's offset field, then check its header, length and CRC in
        place. CorruptBatchError leaves the reservation open for discard."""
        assert self._mm is not None and self._reservation is not None
        position, total_bytes, _, _ = self._reservation
        mm = self._mm
        header = parse_header(mm, position)
        _OFFSET_FIELD.pack_into(mm, position, POISON_OFFSET)
        if header.total_bytes != total_bytes:
            raise CorruptBatchError(f"batch says {header.total_bytes} bytes, frame carried "
                                    f"{total_bytes}")
        if header.record_count > records_max(header):
            raise CorruptBatchError(f"{header.record_count} records cannot fit in "
                                    f"{header.total_bytes} bytes")
        validate(mm, position)
        return header

    def commit(self, header: BatchHeader, base_offset: int, leader_epoch: int) -> None:
        """Stamp the reserved batch, index it, and publish it to readers."""
        assert self._mm is not None and self._reservation is not None
        assert base_offset == self.next_offset
        position, total_bytes, _, _ = self._reservation
        stamp(self._mm, base_offset, leader_epoch, position)
        self._release_reservation()
        if self.max_timestamp_ms is None or header.timestamp_ms > self.max_timestamp_ms:
            self.max_timestamp_ms = header.timestamp_ms
            self.max_timestamp_offset = base_offset
        if self._bytes_since_index >= self.config.index_interval_bytes:
            self._append_time_entry()
            if self._index.append(base_offset, position):
                self._bytes_since_index = 0
        self._bytes_since_index += total_bytes
        self._committed = (base_offset + header.record_count, position + total_bytes)

    def _append_time_entry(self) -> None:
        """Index the largest timestamp so far, when it grew since the last entry (skipped, like
        an offset index entry, when the file system has no room)."""
        last = self._time_index.last_timestamp()
        if self.max_timestamp_ms is not None and (last is None or self.max_timestamp_ms > last):
            assert self.max_timestamp_offset is not None
            self._time_index.append(self.max_timestamp_ms, self.max_timestamp_offset)

    def discard(self) -> None:
        """Wipe an abandoned reservation (rejected batch, duplicate, or a fill that raised)."""
        assert self._mm is not None and self._reservation is not None
        position, total_bytes, _, _ = self._reservation
        self._release_reservation()
        end = position + total_bytes
        while position < end:
            chunk = min(len(_ZEROS), end - position)
            self._mm[position:position + chunk] = _ZEROS[:chunk]
            position += chunk

    def _release_reservation(self) -> None:
        assert self._reservation is not None
        _, _, whole, region = self._reservation
        self._reservation = None
        # A fill may still hold a view derived from the region (say, in a traceback); then the
        # map lives on until that view dies, which is harmless: nobody writes through it.
        with contextlib.suppress(BufferError):
            region.release()
        with contextlib.suppress(BufferError):
            whole.release()

    # -- reading (lock-free) -------------------------------------------------------------

    def read_slice(self, offset: int, max_bytes: int, upto_offset: int,
                   at_least_one: bool) -> tuple[FileSlice, int] | None:
        """(slice, next offset after it) of whole committed batches from the one holding
        `offset`, ending at most at max_bytes (but holding the first batch when at_least_one)
        and before the batch holding `upto_offset`. None when nothing qualifies."""
        file = self._file
        next_offset, committed_end = self._committed
        if offset >= next_offset or offset >= upto_offset:
            return None
        first = self._locate(offset, committed_end)
        if first is None:
            return None
        if upto_offset >= next_offset:
            limit = (committed_end, next_offset)
        else:
            upto = self._locate(upto_offset, committed_end)
            if upto is None:
                return None
            limit = (upto.position, upto.base_offset)
        if first.position >= limit[0]:
            return None
        end, end_offset = self._boundary_at_or_before(first.position + max_bytes, first, limit)
        if end == first.position:
            if not at_least_one:
                return None
            end, end_offset = first.end, first.next_offset
        return FileSlice(file.fd, first.position, end - first.position, owner=file), end_offset

    def locate(self, offset: int) -> tuple[int, int] | None:
        """(position, base offset) of the committed batch holding `offset`, or None."""
        head = self._locate(offset, self.end_position)
        return None if head is None else (head.position, head.base_offset)

    def _locate(self, offset: int, committed_end: int) -> _Head | None:
        hit = self._index.lookup(offset)
        position = DATA_START if hit is None else hit[1]
        while position < committed_end:
            head = self._read_head(position)
            if head is None:
                return None
            if head.next_offset > offset:
                return head
            position = head.end
        return None

    def _boundary_at_or_before(self, target: int, first: _Head,
                               limit: tuple[int, int]) -> tuple[int, int]:
        """(position, offset) of the last batch boundary at or before `target`, not before
        `first` and not past `limit`."""
        if target >= limit[0]:
            return limit
        position, offset = first.position, first.base_offset
        hit = self._index.lookup_position(target)
        if hit is not None and hit[1] > position:
            offset, position = hit
        while position < limit[0]:
            head = self._read_head(position)
            if head is None or head.end > target:
                break
            position, offset = head.end, head.next_offset
        return position, offset

    def _read_head(self, position: int) -> _Head | None:
        raw = os.pread(self._file.fd, _HEAD.size, position)
        if len(raw) < _HEAD.size:
            return None  # the file was cut under a racing reader
        base_offset, batch_length, _, _, _, _, record_count = _HEAD.unpack(raw)
        if batch_length == 0:
            return None
        return _Head(position, base_offset, LENGTH_FIELD_END + batch_length, record_count)

    def iter_headers(self) -> Iterator[BatchHeader]:
        """Every committed batch header, in order (headers only: one pread each)."""
        position, end = DATA_START, self.end_position
        while position < end:
            header = parse_header(os.pread(self._file.fd, HEADER_BYTES, position))
            yield header
            position += header.total_bytes

    def read_bytes(self, position: int, nbytes: int) -> bytes:
        return os.pread(self._file.fd, nbytes, position)

    def headers_from(self, offset: int) -> Iterator[tuple[BatchHeader, int]]:
        """(header, position) of every committed batch from the one holding `offset` on (one
        pread of a header each)."""
        next_offset, end = self._committed
        head = self._locate(offset, end) if offset < next_offset else None
        position = end if head is None else head.position
        while position < end:
            raw = os.pread(self._file.fd, HEADER_BYTES, position)
            if len(raw) < HEADER_BYTES:
                return  # cut under a racing reader (above the high watermark only)
            header = parse_header(raw)
            yield header, position
            position += header.total_bytes

    def timestamp_search_start(self, timestamp_ms: int) -> int:
        """An offset at or before the batch preceding the first batch stamped at or after
        `timestamp_ms`: the time index's last entry below it, else the segment's base."""
        below = self._time_index.offset_below(timestamp_ms)
        return self.base_offset if below is None else below

    # -- truncation, durability, lifetime (under the partition lock) --------------------

    def truncate_to(self, position: int, next_offset: int) -> None:
        """Cut the segment at batch boundary `position` (holding offsets below next_offset)
        and make it the active segment again."""
        assert DATA_START <= position <= self.end_position and self._reservation is None
        self._close_map()
        self._index.truncate_to_position(position)
        self._time_index.truncate_to_offset(next_offset)
        self._committed = (next_offset, position)
        last_indexed = self._index.last_position()
        self._bytes_since_index = position - (DATA_START if last_indexed is None
                                              else last_indexed)
        self.max_timestamp_ms = self.max_timestamp_offset = None
        for header in self.iter_headers():
            if self.max_timestamp_ms is None or header.timestamp_ms > self.max_timestamp_ms:
                self.max_timestamp_ms = header.timestamp_ms
                self.max_timestamp_offset = header.base_offset
        self.activate()

    def flush(self) -> None:
        if self._mm is not None:
            self._mm.flush()
        else:
            os.fsync(self._file.fd)
        self._index.flush()
        self._time_index.flush()

    def close(self) -> None:
        """Unmap and close the index; the log descriptor closes with its last holder."""
        assert self._reservation is None
        self._close_map()
        self._index.close()
        self._time_index.close()

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
        self._index.path.unlink(missing_ok=True)
        self._time_index.path.unlink(missing_ok=True)

    def _close_map(self) -> None:
        mm, self._mm = self._mm, None
        if mm is not None:
            # BufferError: a fill kept a view (see _release_reservation); the map is then
            # unmapped when that view is collected.
            with contextlib.suppress(BufferError):
                mm.close()


# -- recovery helpers ---------------------------------------------------------------------


def _recover(fd: int, path: Path, base_offset: int, config: LogConfig,
             on_batch: Callable[[BatchHeader], None] | None) -> _Scan:
    size = os.fstat(fd).st_size
    if size < DATA_START:
        raise CorruptSegmentError(f"{path}: {size} bytes, shorter than the segment header")
    magic, version, _, stored_base = _SEGMENT_HEADER.unpack(os.pread(fd, DATA_START, 0))
    if magic != SEGMENT_MAGIC:
        raise CorruptSegmentError(f"{path}: no {SEGMENT_MAGIC!r} magic")
    if version != SEGMENT_FORMAT_VERSION:
        raise CorruptSegmentError(f"{path}: unknown segment format version {version}")
    if stored_base != base_offset:
        raise CorruptSegmentError(f"{path}: header names base offset {stored_base}")
    try:
        stored_index = OffsetIndex.read_entries(index_path(path.parent, base_offset))
    except FileNotFoundError:
        log.warning("%s: index missing; rebuilding it", path)
        stored_index = None
    except CorruptIndexError as exc:
        log.warning("%s; rebuilding it", exc)
        stored_index = None
    # Scan only up to the first hole: on tmpfs even reading a never-written page through a
    # map allocates it, which a full disk answers with SIGBUS. Batches are only ever stored
    # into blocks already reserved, so no valid one lies beyond a hole.
    with mmap.mmap(fd, _bytes_before_hole(fd, size), mmap.MAP_SHARED, mmap.PROT_READ) as mm:
        return _scan(mm, base_offset, config, stored_index, on_batch)


def _bytes_before_hole(fd: int, size: int) -> int:
    try:
        hole = os.lseek(fd, 0, os.SEEK_HOLE)
    except OSError:  # no hole support: the file system calls the whole file data
        return size
    return max(DATA_START, min(size, hole))


def _scan(mm: mmap.mmap, base_offset: int, config: LogConfig,
          stored_index: list[tuple[int, int]] | None,
          on_batch: Callable[[BatchHeader], None] | None) -> _Scan:
    """One pass over the batches of a mapped log file (see LogSegment.open)."""
    scan = _Scan(next_offset=base_offset)
    checker = _IndexChecker(stored_index, base_offset)
    position = DATA_START
    while True:
        header, scan.stop_reason = _valid_batch_at(mm, position, scan.next_offset)
        if header is None:
            break
        checker.see(position, header.base_offset)
        if scan.max_timestamp_ms is None or header.timestamp_ms > scan.max_timestamp_ms:
            scan.max_timestamp_ms = header.timestamp_ms
            scan.max_timestamp_offset = header.base_offset
        if scan.bytes_since_index >= config.index_interval_bytes:
            scan.rebuilt_index.append((header.base_offset - base_offset, position))
            _rebuild_time_entry(scan, base_offset)
            scan.bytes_since_index = 0
        scan.bytes_since_index += header.total_bytes
        if on_batch is not None:
            on_batch(header)
        position += header.total_bytes
        scan.next_offset = header.next_offset
    scan.end_position = position
    scan.kept_index = checker.finish(position)
    return scan


def _rebuild_time_entry(scan: _Scan, base_offset: int) -> None:
    """The time index entry LogSegment.commit adds at this batch, if any."""
    entries = scan.rebuilt_time_index
    assert scan.max_timestamp_ms is not None and scan.max_timestamp_offset is not None
    if not entries or scan.max_timestamp_ms > entries[-1][0]:
        entries.append((scan.max_timestamp_ms, scan.max_timestamp_offset - base_offset))


def _valid_batch_at(mm: mmap.mmap, position: int,
                    expected_offset: int) -> tuple[BatchHeader | None, str | None]:
    """(header, None) for a valid batch at `position`; (None, reason) where the valid data
    ends, reason None when it ends cleanly (end of file or zeros)."""
    remaining = len(mm) - position
    if remaining < LENGTH_FIELD_END:
        clean = mm[position:] == bytes(remaining)
        return None, None if clean else "torn length field"
    if mm[position:position + LENGTH_FIELD_END] == bytes(LENGTH_FIELD_END):
        return None, None
    try:
        header = validate(mm, position)
    except CorruptBatchError as exc:
        return None, str(exc)
    if header.base_offset != expected_offset:
        return None, f"base offset {header.base_offset}, expected {expected_offset}"
    if header.record_count > records_max(header):
        return None, f"record count {header.record_count} does not fit the batch"
    return header, None


class _IndexChecker:
    """Walks the stored index alongside the log scan: every entry must name a batch start with
    the right offset; entries at or beyond the end of the valid data are dropped."""

    def __init__(self, entries: list[tuple[int, int]] | None, base_offset: int):
        self.entries = entries
        self.base_offset = base_offset
        self.matched = 0

    def see(self, position: int, offset: int) -> None:
        if self.entries is None or self.matched == len(self.entries):
            return
        rel, entry_position = self.entries[self.matched]
        if entry_position < position or (entry_position == position
                                         and rel != offset - self.base_offset):
            log.warning("index entry (%d, %d) names no batch; rebuilding the index", rel,
                        entry_position)
            self.entries = None
        elif entry_position == position:
            self.matched += 1

    def finish(self, end_position: int) -> list[tuple[int, int]] | None:
        """The entries to keep, or None when the index must be rebuilt."""
        if self.entries is None:
            return None
        if self.matched < len(self.entries) and self.entries[self.matched][1] < end_position:
            log.warning("index entry at byte %d names no batch; rebuilding the index",
                        self.entries[self.matched][1])
            return None
        return self.entries[:self.matched]


def _recovered_index(directory: Path, base_offset: int, scan: _Scan,
                     space: DiskSpace) -> OffsetIndex:
    path = index_path(directory, base_offset)
    if scan.kept_index is None:
        log.warning("%s: rebuilt from the log (%d entries)", path, len(scan.rebuilt_index))
        try:
            with space.writing(path):
                return OffsetIndex.rewrite(path, base_offset, scan.rebuilt_index)
        except StorageFullError:
            # No room for the rebuilt file (a restart on a full disk): start the index empty
            # rather than not start. It is sparse, so lookups only walk more headers; appends
            # add entries again once there is room.
            path.unlink(missing_ok=True)
            scan.bytes_since_index = scan.end_position - DATA_START
            return OffsetIndex(path, base_offset, [])
    entries = scan.kept_index
    os.truncate(path, len(entries) * ENTRY_BYTES)  # drops entries past the end of valid data
    scan.bytes_since_index = scan.end_position - (entries[-1][1] if entries else DATA_START)
    return OffsetIndex(path, base_offset, entries)


def _recovered_time_index(directory: Path, base_offset: int, scan: _Scan,
                          space: DiskSpace) -> TimeIndex:
    """The time index the scan recomputed: the stored file is kept when it holds exactly
    those entries, rewritten otherwise (missing, torn, cut, or sparser after a full disk);
    started empty when there is no room to rewrite it (lookups then walk more headers)."""
    path = time_index_path(directory, base_offset)
    entries = scan.rebuilt_time_index
    try:
        if TimeIndex.read_entries(path) == entries:
            return TimeIndex(path, base_offset, entries)
    except FileNotFoundError:
        log.warning("%s: time index missing; rebuilding it", path)
    except CorruptIndexError as exc:
        log.warning("%s; rebuilding it", exc)
    try:
        with space.writing(path):
            return TimeIndex.rewrite(path, base_offset, entries)
    except StorageFullError:
        path.unlink(missing_ok=True)
        return TimeIndex(path, base_offset, [])
