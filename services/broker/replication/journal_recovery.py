"""Opening the journal's file and recovering it: the header check, the scan of its records,
and the cut of a torn tail (journal.py holds the Journal, journal_record.py the format).

Recovery on open tells a torn tail from corruption. Only the LAST record can be torn (an
append is one write at the end of the file; a crash can leave it short, or, after a machine
crash, with bytes that never reached the disk): a record that runs past the end of the file,
a bad CRC or an impossible length in a record that is the last one (nothing after its extent;
for an impossible length: less than one record's bytes left), or a tail of zero bytes
(space the file system allocated but never wrote) is cut (ftruncate + fsync) with a logged
warning. Anything else -- a bad CRC, an impossible length or unreadable fields with records
after it, or a whole record (good CRC) whose index is not the previous + 1, whose epoch goes
back or whose kind is unknown -- is corruption, not a crash: `CorruptJournalError` naming the
byte position, and the broker refuses to start. Cutting there would silently drop committed
entries and make `reconcile` delete the topics they created.

The file is created whole under a temporary name and renamed into place (`write_file`), so
`journal.log` always carries its header; one whose header is wrong is never "repaired"
(CorruptJournalError): an empty journal would make `reconcile` delete every topic. A leftover
temporary file (an interrupted creation, compaction or install) is deleted on open.

Called by the Journal while it opens (and `write_file` while it rewrites the file, under its
locks); nothing here keeps state between calls.
"""

from __future__ import annotations

import logging
import os
from array import array
from dataclasses import dataclass, field
from pathlib import Path

import crc32c

from common.kaska.errors import InvalidResponseError
from services.broker.replication.errors import CorruptJournalError
from services.broker.replication.journal_record import (
    COMPACTED_VERSIONS,
    FILE_HEADER,
    FILE_HEADER_BYTES,
    JOURNAL_FORMAT_VERSION,
    JOURNAL_FORMAT_VERSION_COMPACTED,
    JOURNAL_FORMAT_VERSION_COMPACTED_V2,
    JOURNAL_MAGIC,
    PAYLOAD_BYTES_MAX,
    PAYLOAD_BYTES_MIN,
    RECORD_PREFIX,
    RECORD_PREFIX_BYTES,
    InvalidRecordError,
    JournalEntry,
    TopicId,
    decode_payload,
    file_head,
    identified,
    snapshot_incarnations,
)
from services.broker.replication.snapshot import Snapshot
from services.broker.replication.wire.peer_auth import OutOfRangeFieldError
from services.broker.replication.wire.replication_bounds import check_snapshot
from services.broker.storage.partition import fsync_directory

log = logging.getLogger(__name__)

_READ_CHUNK_BYTES = 1 << 20


def recover(fd: int, path: Path) -> RecoveredFile:
    """Read the journal file open at `fd`: its snapshot and every valid record. A torn tail is
    cut (ftruncate + fsync, with a logged warning); corruption raises CorruptJournalError."""
    snapshot, records_start = read_header(fd, path)
    scan = _scan(fd, path, snapshot, records_start)
    if scan.stop_reason is not None:
        log.warning("%s: valid entries end at byte %d after %d entries (%s); the rest is "
                    "cut", path, scan.end_position, len(scan.entries),
                    scan.stop_reason)
        os.ftruncate(fd, scan.end_position)
        os.fsync(fd)
    return scan


class _Reader:
    """Sequential reads of a file in large chunks (recovery reads the journal once)."""

    def __init__(self, fd: int, position: int):
        self.fd = fd
        self.position = position  # of the next unread byte
        self._buffer = b""
        self._at = 0

    def take(self, nbytes: int) -> memoryview | None:
        """The next nbytes, or None (nothing consumed) when the file ends first."""
        if len(self._buffer) - self._at < nbytes and not self._fill(nbytes):
            return None
        view = memoryview(self._buffer)[self._at:self._at + nbytes]
        self._at += nbytes
        self.position += nbytes
        return view

    def _fill(self, nbytes: int) -> bool:
        rest = self._buffer[self._at:]
        chunks = [rest]
        have = len(rest)
        while have < nbytes:
            chunk = os.pread(self.fd, max(_READ_CHUNK_BYTES, nbytes - have),
                             self.position + have)
            if not chunk:
                break
            chunks.append(chunk)
            have += len(chunk)
        self._buffer = b"".join(chunks)
        self._at = 0
        return have >= nbytes


@dataclass
class RecoveredFile:
    """What recovery kept of the file."""

    snapshot: Snapshot = Snapshot()
    records_start: int = FILE_HEADER_BYTES  # where the first record sits
    entries: list[JournalEntry] = field(default_factory=list)
    positions: array = field(default_factory=lambda: array("q"))
    end_position: int = FILE_HEADER_BYTES
    stop_reason: str | None = None  # None: the file ended cleanly
    incarnations: dict[str, TopicId] = field(default_factory=dict)


def _read_record(reader: _Reader) -> JournalEntry:
    prefix = reader.take(RECORD_PREFIX_BYTES)
    if prefix is None:
        raise InvalidRecordError("torn record prefix", past_end=True)
    length, crc = RECORD_PREFIX.unpack(prefix)
    if not PAYLOAD_BYTES_MIN <= length <= PAYLOAD_BYTES_MAX:
        raise InvalidRecordError(f"payload length {length} out of bounds", bad_length=True)
    payload = reader.take(length)
    if payload is None:
        raise InvalidRecordError(f"torn record (payload of {length} bytes)", past_end=True)
    computed = crc32c.crc32c(payload)
    if computed != crc:
        raise InvalidRecordError(f"crc32c {crc:#010x} != computed {computed:#010x}",
                                 record_end=reader.position)
    # The CRC held: these are the bytes that were written, so no crash explains a field that
    # does not decode (record_end None: never a torn tail, see _is_torn_tail).
    return decode_payload(payload)


def _check_follows(scan: RecoveredFile, entry: JournalEntry) -> None:
    expected = scan.snapshot.end + len(scan.entries)
    if entry.index != expected:
        raise InvalidRecordError(f"index {entry.index} where {expected} was expected")
    last = scan.entries[-1].epoch if scan.entries else scan.snapshot.last_epoch
    if entry.epoch < last:
        raise InvalidRecordError(f"epoch {entry.epoch} after epoch {last}")


def _scan(fd: int, path: Path, snapshot: Snapshot, records_start: int) -> RecoveredFile:
    """Read every record; a torn tail ends the scan (stop_reason), anything else that is not a
    valid next entry raises CorruptJournalError."""
    file_bytes = os.fstat(fd).st_size
    scan = RecoveredFile(snapshot, records_start, end_position=records_start,
                 incarnations=snapshot_incarnations(snapshot))
    reader = _Reader(fd, records_start)
    while reader.position < file_bytes:
        start = reader.position
        try:
            entry = _read_record(reader)
        except InvalidRecordError as exc:
            if _is_torn_tail(fd, start, file_bytes, exc):
                scan.stop_reason = f"{exc} at byte {start}"
                break
            raise CorruptJournalError(
                f"{path}: {exc} at byte {start} (after {len(scan.entries)} valid entries, "
                f"{file_bytes - start} bytes before the end of the file): corruption inside "
                "the journal, not a torn tail; refusing to start rather than drop the entries "
                "after it (restore the data directory, or empty it to rebuild this broker "
                "from its peers)") from None
        try:
            _check_follows(scan, entry)
        except InvalidRecordError as exc:
            raise CorruptJournalError(f"{path}: record at byte {start}: {exc} (a whole record "
                                      "with a valid CRC: corruption, not a torn tail)") from None
        scan.entries.append(identified(entry, scan.incarnations))
        scan.positions.append(start)
        scan.end_position = reader.position
    return scan


def _is_torn_tail(fd: int, start: int, file_bytes: int, invalid: InvalidRecordError) -> bool:
    """Whether the bad record at `start` can be what a crash leaves of the LAST append: it runs
    past the end of the file, or it is the last record (by its own length; with an impossible
    length: less than one record's bytes are left), or all that follows is zero bytes."""
    if invalid.past_end:
        return True
    if invalid.record_end is not None and invalid.record_end >= file_bytes:
        return True
    if invalid.bad_length and file_bytes - start < RECORD_PREFIX_BYTES + PAYLOAD_BYTES_MAX:
        return True
    return _zeros_to_end(fd, start, file_bytes)


def _zeros_to_end(fd: int, start: int, file_bytes: int) -> bool:
    position = start
    while position < file_bytes:
        chunk = os.pread(fd, min(_READ_CHUNK_BYTES, file_bytes - position), position)
        if not chunk or chunk.count(0) != len(chunk):
            return False
        position += len(chunk)
    return True


def read_header(fd: int, path: Path) -> tuple[Snapshot, int]:
    """The file's snapshot (empty for version 1) and where its records start."""
    header = os.pread(fd, FILE_HEADER_BYTES, 0)
    if len(header) < FILE_HEADER_BYTES:
        raise CorruptJournalError(f"{path}: {len(header)} bytes, shorter than the header")
    magic, version, _reserved = FILE_HEADER.unpack(header)
    if magic != JOURNAL_MAGIC:
        raise CorruptJournalError(f"{path}: bad magic {magic!r}")
    if version == JOURNAL_FORMAT_VERSION:
        return Snapshot(), FILE_HEADER_BYTES
    if version not in COMPACTED_VERSIONS:
        raise CorruptJournalError(f"{path}: unknown format version {version}")
    # The snapshot was fsynced before the file was renamed into place: no crash tears it.
    prefix = os.pread(fd, RECORD_PREFIX_BYTES, FILE_HEADER_BYTES)
    if len(prefix) < RECORD_PREFIX_BYTES:
        raise CorruptJournalError(f"{path}: compacted journal without its snapshot")
    length, crc = RECORD_PREFIX.unpack(prefix)
    payload = os.pread(fd, length, FILE_HEADER_BYTES + RECORD_PREFIX_BYTES)
    if len(payload) != length or crc32c.crc32c(payload) != crc:
        raise CorruptJournalError(f"{path}: the snapshot ({length} bytes) is cut short or "
                                  "fails its crc32c")
    try:
        snapshot = check_snapshot(Snapshot.decode(
            payload, with_metadata_end=version != JOURNAL_FORMAT_VERSION_COMPACTED_V2,
            with_log_starts=version == JOURNAL_FORMAT_VERSION_COMPACTED))
    except (InvalidResponseError, OutOfRangeFieldError) as exc:
        raise CorruptJournalError(f"{path}: unreadable snapshot: {exc}") from None
    return snapshot, FILE_HEADER_BYTES + RECORD_PREFIX_BYTES + length


def write_file(path: Path, head: bytes, records: bytes = b"") -> int:
    """A whole journal file, written under a temporary name, fsynced and renamed into place:
    a crash leaves the old file or the new one, never neither. Returns the new file's
    descriptor (O_APPEND); the caller fsyncs the directory once it adopted it."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        for data in (head, records):
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        os.fsync(fd)
        os.replace(tmp, path)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    return fd


def _create_file(path: Path) -> None:
    """An empty journal, header included, renamed into place once durable."""
    os.close(write_file(path, file_head(Snapshot())))
    fsync_directory(path.parent)


def open_file(path: Path) -> int:
    # An interrupted creation, compaction or install: journal.log is the old file, whole.
    path.with_name(path.name + ".tmp").unlink(missing_ok=True)
    if not path.exists():
        _create_file(path)
    return os.open(path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
