"""Journal: the replication journal, the Raft log of the cluster (docs/replication.md).

One entry per change to the data directory, in the one order the leader made them; the
partition files hold the bytes BATCH entries point at.

File format (`DIR/journal.log`), big-endian:

    0   4  magic           b"KJNL"
    4   2  format_version  JOURNAL_FORMAT_VERSION (1), or 4 for a compacted journal (2: one
                           compacted before the snapshot table ended with the topic mirror's
                           watermark; still read, the watermark 0; 3: before it ended with
                           DELETE_RECORDS' log starts; still read, none)
    6   2  reserved        0
    (versions 2, 3, 4) u32 length | u32 crc32c | snapshot table (snapshot_fetch.py): the state
                      of the compacted prefix, every entry below its `end` (snapshot.py)
    ..  records back to back, one per entry, the first one's index the snapshot's end (0 for
        version 1):

    u32 length (of the payload) | u32 crc32c(payload) | payload
    payload: i64 index | i32 epoch | u8 kind | u16 topic length | topic (utf-8)
             | u32 partition | i64 base_offset | u32 record_count | u32 partitions
             | u32 batch_bytes

A payload is PAYLOAD_BYTES_MIN..PAYLOAD_BYTES_MAX bytes (the topic is at most
TOPIC_BYTES_MAX = 249 utf-8 bytes; topic names are ASCII). The file is created whole under a
temporary name and renamed into place, so `journal.log` always carries its header; one whose
header is wrong is never "repaired" (CorruptJournalError): an empty journal would make
`reconcile` delete every topic.

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
entries and make `reconcile` delete the topics they created (issue 20, finding 7).

Topic ids (issue 20, findings 1 and 4): every incarnation of a topic is named by the
(epoch, index) of the CREATE_TOPIC entry that made it, `TopicId`. The journal derives the id of
every entry as it appends or reads it (a CREATE_TOPIC names itself; a BATCH, SKIPPED or
DELETE_TOPIC names the incarnation the journal's latest CREATE_TOPIC of its topic made, None for
a topic never created in the journal, such as the internal `__offsets`). Every replica derives
the same ids from the same prefix (Raft's log matching: one entry per (epoch, index)), so they
travel neither on disk nor on the wire; a journal that is ever compacted must keep them in its
snapshot. `incarnation(topic)` is the id the journal's latest CREATE_TOPIC of `topic` gave.
A data group's CREATE_TOPIC (replication/topic_mirror.py) opens, in its own journal, an
incarnation the metadata group created: it carries that incarnation's id (`carries`: its
`record_count` holds the id's epoch + 1, its `base_offset` the id's index; both are unused by a
CREATE_TOPIC otherwise, so a metadata group's CREATE_TOPIC carries nothing) and names it,
not itself, so one incarnation has one id in every group. A data group's DELETE_TOPIC carries
the end of the metadata group's committed prefix its close was decided on (`closing`: in its
`base_offset`, unused by a DELETE_TOPIC otherwise; 0, as in the metadata group's own deletes:
nothing carried). `metadata_end_seen` of an entry is that end, or for a carried id its index
+ 1 (the open was decided on a prefix holding that CREATE): the topic mirror's watermark.

Full disk: the journal is written with `write` (no map), so a full disk is an ordinary error:
the failed or short write is cut off again and `append` / `append_replica` raise
StorageFullError (KAFKA_STORAGE_ERROR, retriable; counted in the data directory's DiskSpace)
with nothing added. The caller retries later.

Compaction (issue 20, finding 10; Raft §7, KIP-630): `compact(upto)` folds the entries below
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
import struct
import threading
from array import array
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import NamedTuple

import crc32c

from common.kaska.errors import InvalidResponseError, NotLeaderError
from common.kaska.protocol.peer_auth import OutOfRangeFieldError
from common.kaska.protocol.replica_fetch import EntryKind
from common.kaska.protocol.replication_bounds import check_snapshot
from services.broker.replication.errors import (
    CorruptJournalError,
    InvalidJournalEntryError,
    JournalClosedError,
    JournalCompactedError,
    JournalEpochError,
    JournalGapError,
)
from services.broker.replication.snapshot import Snapshot, advance, partition_ends
from services.broker.storage.disk_space import DiskSpace
from services.broker.storage.partition import fsync_directory

__all__ = ["EntryKind", "Journal", "JournalEntry", "NO_EPOCH", "Snapshot", "TopicId"]

log = logging.getLogger(__name__)

JOURNAL_FILE = "journal.log"
JOURNAL_MAGIC = b"KJNL"
JOURNAL_FORMAT_VERSION = 1
JOURNAL_FORMAT_VERSION_COMPACTED = 4  # a snapshot follows the header
# A snapshot follows whose table predates `log_starts` (read, never written).
JOURNAL_FORMAT_VERSION_COMPACTED_V3 = 3
# A snapshot follows whose table predates `metadata_end_seen` (read, never written).
JOURNAL_FORMAT_VERSION_COMPACTED_V2 = 2
_COMPACTED_VERSIONS = (JOURNAL_FORMAT_VERSION_COMPACTED, JOURNAL_FORMAT_VERSION_COMPACTED_V3,
                       JOURNAL_FORMAT_VERSION_COMPACTED_V2)
NO_EPOCH = -1  # end_of_epoch's answer when no epoch qualifies (same value as raft.NO_EPOCH)
TOPIC_BYTES_MAX = 249

_FILE_HEADER = struct.Struct(">4sHH")
_PREFIX = struct.Struct(">II")  # payload length, crc32c
_HEAD = struct.Struct(">qiBH")  # index, epoch, kind, topic length
_TAIL = struct.Struct(">IqIII")  # partition, base_offset, record_count, partitions, batch_bytes
FILE_HEADER_BYTES = _FILE_HEADER.size
RECORD_PREFIX_BYTES = _PREFIX.size
PAYLOAD_BYTES_MIN = _HEAD.size + _TAIL.size
PAYLOAD_BYTES_MAX = PAYLOAD_BYTES_MIN + TOPIC_BYTES_MAX
_READ_CHUNK_BYTES = 1 << 20


class TopicId(NamedTuple):
    """One incarnation of a topic: the (epoch, index) of the CREATE_TOPIC entry that made it."""

    epoch: int
    index: int


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One journal entry; fields a kind does not use stay at their defaults."""

    index: int
    epoch: int
    kind: EntryKind
    topic: str = ""
    partition: int = 0
    base_offset: int = 0  # BATCH, SKIPPED
    record_count: int = 0  # BATCH, SKIPPED
    partitions: int = 0  # CREATE_TOPIC
    batch_bytes: int = 0  # BATCH: the batch's size in its partition file
    # Derived by the journal (see the module docstring), never stored; None: no incarnation.
    topic_id: TopicId | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.kind, EntryKind):
            try:
                object.__setattr__(self, "kind", EntryKind(self.kind))
            except ValueError:
                raise InvalidJournalEntryError(f"unknown entry kind {self.kind!r}") from None

    @property
    def end_offset(self) -> int:
        """The partition offset after this entry's records (BATCH, SKIPPED)."""
        return self.base_offset + self.record_count

    @property
    def carried_topic_id(self) -> TopicId | None:
        """The metadata group's incarnation a data group's CREATE_TOPIC opens (see the module
        docstring); None for every other entry."""
        return carried_topic_id(self.kind, self.base_offset, self.record_count)

    @property
    def metadata_end_seen(self) -> int:
        """The metadata group's prefix end a data group's CREATE_TOPIC or DELETE_TOPIC was
        decided on, at least (see the module docstring); 0 for every other entry."""
        if self.kind is EntryKind.DELETE_TOPIC:
            return self.base_offset
        carried = self.carried_topic_id
        return carried.index + 1 if carried is not None else 0


def carried_topic_id(kind: EntryKind, base_offset: int, record_count: int) -> TopicId | None:
    if kind is not EntryKind.CREATE_TOPIC or record_count == 0:
        return None
    return TopicId(record_count - 1, base_offset)


def carrying(topic_id: TopicId) -> dict[str, int]:
    """The fields of a CREATE_TOPIC that opens the incarnation `topic_id` in a data group."""
    return {"base_offset": topic_id.index, "record_count": topic_id.epoch + 1}


def closing(metadata_end: int) -> dict[str, int]:
    """The fields of a DELETE_TOPIC that closes a topic in a data group, decided on the
    metadata group's committed prefix below `metadata_end`."""
    return {"base_offset": metadata_end}


# -- the record codec ---------------------------------------------------------------------


def encode_entry(entry: JournalEntry) -> bytes:
    """The entry's record (prefix and payload); InvalidJournalEntryError when a field does not
    fit its on-disk range."""
    topic = entry.topic.encode("utf-8")
    if len(topic) > TOPIC_BYTES_MAX:
        raise InvalidJournalEntryError(f"topic of {len(topic)} bytes; {TOPIC_BYTES_MAX} allowed")
    if entry.index < 0 or entry.epoch < 0 or entry.base_offset < 0:
        raise InvalidJournalEntryError(f"negative index, epoch or base offset in {entry}")
    try:
        payload = b"".join((
            _HEAD.pack(entry.index, entry.epoch, entry.kind, len(topic)), topic,
            _TAIL.pack(entry.partition, entry.base_offset, entry.record_count,
                       entry.partitions, entry.batch_bytes)))
    except struct.error as exc:
        raise InvalidJournalEntryError(f"{entry}: {exc}") from None
    return _PREFIX.pack(len(payload), crc32c.crc32c(payload)) + payload


class _InvalidRecord(Exception):
    """Why recovery stops at a record (never escapes this module). `record_end`: where the
    record ends by its own length, None when that length is unknown or impossible;
    `past_end`: the record runs past the end of the file (a short, torn write); `bad_length`:
    its length prefix is impossible (so where it ends is unknown)."""

    def __init__(self, reason: str, record_end: int | None = None, past_end: bool = False,
                 bad_length: bool = False):
        super().__init__(reason)
        self.record_end = record_end
        self.past_end = past_end
        self.bad_length = bad_length


def decode_payload(payload: bytes | memoryview) -> JournalEntry:
    """The entry in a payload whose CRC already held; _InvalidRecord when its fields do not."""
    index, epoch, kind, topic_bytes = _HEAD.unpack_from(payload, 0)
    if _HEAD.size + topic_bytes + _TAIL.size != len(payload):
        raise _InvalidRecord(f"topic length {topic_bytes} disagrees with payload length "
                             f"{len(payload)}")
    if topic_bytes > TOPIC_BYTES_MAX:
        raise _InvalidRecord(f"topic of {topic_bytes} bytes")
    try:
        topic = bytes(payload[_HEAD.size:_HEAD.size + topic_bytes]).decode("utf-8")
        entry_kind = EntryKind(kind)
    except (UnicodeDecodeError, ValueError) as exc:
        raise _InvalidRecord(str(exc)) from None
    if index < 0 or epoch < 0:
        raise _InvalidRecord(f"negative index {index} or epoch {epoch}")
    partition, base_offset, record_count, partitions, batch_bytes = _TAIL.unpack_from(
        payload, _HEAD.size + topic_bytes)
    if base_offset < 0:
        raise _InvalidRecord(f"negative base offset {base_offset}")
    return JournalEntry(index, epoch, entry_kind, topic, partition, base_offset, record_count,
                        partitions, batch_bytes)


# -- recovery -----------------------------------------------------------------------------


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
class _Scan:
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
        raise _InvalidRecord("torn record prefix", past_end=True)
    length, crc = _PREFIX.unpack(prefix)
    if not PAYLOAD_BYTES_MIN <= length <= PAYLOAD_BYTES_MAX:
        raise _InvalidRecord(f"payload length {length} out of bounds", bad_length=True)
    payload = reader.take(length)
    if payload is None:
        raise _InvalidRecord(f"torn record (payload of {length} bytes)", past_end=True)
    computed = crc32c.crc32c(payload)
    if computed != crc:
        raise _InvalidRecord(f"crc32c {crc:#010x} != computed {computed:#010x}",
                             record_end=reader.position)
    # The CRC held: these are the bytes that were written, so no crash explains a field that
    # does not decode (record_end None: never a torn tail, see _is_torn_tail).
    return decode_payload(payload)


def _check_follows(scan: _Scan, entry: JournalEntry) -> None:
    expected = scan.snapshot.end + len(scan.entries)
    if entry.index != expected:
        raise _InvalidRecord(f"index {entry.index} where {expected} was expected")
    last = scan.entries[-1].epoch if scan.entries else scan.snapshot.last_epoch
    if entry.epoch < last:
        raise _InvalidRecord(f"epoch {entry.epoch} after epoch {last}")


def _scan(fd: int, path: Path, snapshot: Snapshot, records_start: int) -> _Scan:
    """Read every record; a torn tail ends the scan (stop_reason), anything else that is not a
    valid next entry raises CorruptJournalError."""
    file_bytes = os.fstat(fd).st_size
    scan = _Scan(snapshot, records_start, end_position=records_start,
                 incarnations=_snapshot_incarnations(snapshot))
    reader = _Reader(fd, records_start)
    while reader.position < file_bytes:
        start = reader.position
        try:
            entry = _read_record(reader)
        except _InvalidRecord as exc:
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
        except _InvalidRecord as exc:
            raise CorruptJournalError(f"{path}: record at byte {start}: {exc} (a whole record "
                                      "with a valid CRC: corruption, not a torn tail)") from None
        scan.entries.append(_identified(entry, scan.incarnations))
        scan.positions.append(start)
        scan.end_position = reader.position
    return scan


def _is_torn_tail(fd: int, start: int, file_bytes: int, invalid: _InvalidRecord) -> bool:
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


def _check_header(fd: int, path: Path) -> tuple[Snapshot, int]:
    """The file's snapshot (empty for version 1) and where its records start."""
    header = os.pread(fd, FILE_HEADER_BYTES, 0)
    if len(header) < FILE_HEADER_BYTES:
        raise CorruptJournalError(f"{path}: {len(header)} bytes, shorter than the header")
    magic, version, _reserved = _FILE_HEADER.unpack(header)
    if magic != JOURNAL_MAGIC:
        raise CorruptJournalError(f"{path}: bad magic {magic!r}")
    if version == JOURNAL_FORMAT_VERSION:
        return Snapshot(), FILE_HEADER_BYTES
    if version not in _COMPACTED_VERSIONS:
        raise CorruptJournalError(f"{path}: unknown format version {version}")
    # The snapshot was fsynced before the file was renamed into place: no crash tears it.
    prefix = os.pread(fd, RECORD_PREFIX_BYTES, FILE_HEADER_BYTES)
    if len(prefix) < RECORD_PREFIX_BYTES:
        raise CorruptJournalError(f"{path}: compacted journal without its snapshot")
    length, crc = _PREFIX.unpack(prefix)
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


def _file_head(snapshot: Snapshot) -> bytes:
    """Header (and, once compacted, the snapshot) of a journal file."""
    if snapshot.end == 0:
        return _FILE_HEADER.pack(JOURNAL_MAGIC, JOURNAL_FORMAT_VERSION, 0)
    payload = snapshot.encode()
    return (_FILE_HEADER.pack(JOURNAL_MAGIC, JOURNAL_FORMAT_VERSION_COMPACTED, 0)
            + _PREFIX.pack(len(payload), crc32c.crc32c(payload)) + payload)


def _write_file(path: Path, head: bytes, records: bytes = b"") -> int:
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
    os.close(_write_file(path, _file_head(Snapshot())))
    fsync_directory(path.parent)


def _open_file(path: Path) -> int:
    # An interrupted creation, compaction or install: journal.log is the old file, whole.
    path.with_name(path.name + ".tmp").unlink(missing_ok=True)
    if not path.exists():
        _create_file(path)
    return os.open(path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)


def _identified(entry: JournalEntry, incarnations: dict[str, TopicId]) -> JournalEntry:
    """The entry with its derived topic id; `incarnations` (topic -> the id its latest
    CREATE_TOPIC gave) is updated for a CREATE_TOPIC."""
    if entry.kind is EntryKind.NOOP:
        topic_id = None
    elif entry.kind is EntryKind.CREATE_TOPIC:
        topic_id = entry.carried_topic_id or TopicId(entry.epoch, entry.index)
        incarnations[entry.topic] = topic_id
    else:
        topic_id = incarnations.get(entry.topic)
    return entry if entry.topic_id == topic_id else replace(entry, topic_id=topic_id)


def _snapshot_incarnations(snapshot: Snapshot) -> dict[str, TopicId]:
    return {topic.name: TopicId(topic.id_epoch, topic.id_index) for topic in snapshot.topics}


def _incarnations(snapshot: Snapshot, entries: list[JournalEntry]) -> dict[str, TopicId]:
    incarnations = _snapshot_incarnations(snapshot)
    incarnations.update((entry.topic, entry.topic_id) for entry in entries
                        if entry.kind is EntryKind.CREATE_TOPIC)
    return incarnations


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
            self._fd = _open_file(self.path)
        try:
            scan = self._recover(*_check_header(self._fd, self.path))
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

    def _recover(self, snapshot: Snapshot, records_start: int) -> _Scan:
        scan = _scan(self._fd, self.path, snapshot, records_start)
        if scan.stop_reason is not None:
            log.warning("%s: valid entries end at byte %d after %d entries (%s); the rest is "
                        "cut", self.path, scan.end_position, len(scan.entries),
                        scan.stop_reason)
            os.ftruncate(self._fd, scan.end_position)
            os.fsync(self._fd)
        return scan

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
        if current != _snapshot_incarnations(snapshot).get(topic):
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
        entry = _identified(entry, self._incarnations)
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
            self._incarnations = _incarnations(self._snapshot, self._entries)
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
        head = _file_head(snapshot)
        with self._space.writing(self.path):
            fd = _write_file(self.path, head, records)
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
        self._incarnations = _incarnations(snapshot, self._entries)
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
