"""The journal's on-disk format and its record codec (journal.py holds the Journal itself).

File format (`DIR/journal.log`, `JOURNAL_FILE`), big-endian:

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
TOPIC_BYTES_MAX = 249 utf-8 bytes; topic names are ASCII). How a file is opened, created and
recovered: journal_recovery.py.

The header and the snapshot are written by `file_head`; a record by `encode_entry`, read back
by `decode_payload` (journal_recovery.py scans a file with it).

Topic ids (docs/replication.md): every incarnation of a topic is named by the
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

`identified` derives an entry's id as the journal appends or reads it.

Pure functions and frozen values; thread-safe.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace
from typing import NamedTuple

import crc32c

from services.broker.replication.errors import InvalidJournalEntryError
from services.broker.replication.snapshot import Snapshot
from services.broker.replication.wire.replica_fetch import EntryKind

JOURNAL_FILE = "journal.log"
JOURNAL_MAGIC = b"KJNL"
JOURNAL_FORMAT_VERSION = 1
JOURNAL_FORMAT_VERSION_COMPACTED = 4  # a snapshot follows the header
# A snapshot follows whose table predates `log_starts` (read, never written).
JOURNAL_FORMAT_VERSION_COMPACTED_V3 = 3
# A snapshot follows whose table predates `metadata_end_seen` (read, never written).
JOURNAL_FORMAT_VERSION_COMPACTED_V2 = 2
COMPACTED_VERSIONS = (JOURNAL_FORMAT_VERSION_COMPACTED, JOURNAL_FORMAT_VERSION_COMPACTED_V3,
                      JOURNAL_FORMAT_VERSION_COMPACTED_V2)
TOPIC_BYTES_MAX = 249

FILE_HEADER = struct.Struct(">4sHH")
RECORD_PREFIX = struct.Struct(">II")  # payload length, crc32c
_HEAD = struct.Struct(">qiBH")  # index, epoch, kind, topic length
_TAIL = struct.Struct(">IqIII")  # partition, base_offset, record_count, partitions, batch_bytes
FILE_HEADER_BYTES = FILE_HEADER.size
RECORD_PREFIX_BYTES = RECORD_PREFIX.size
PAYLOAD_BYTES_MIN = _HEAD.size + _TAIL.size
PAYLOAD_BYTES_MAX = PAYLOAD_BYTES_MIN + TOPIC_BYTES_MAX


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
    return RECORD_PREFIX.pack(len(payload), crc32c.crc32c(payload)) + payload


class InvalidRecordError(Exception):
    """Why recovery stops at a record (never escapes journal_recovery.py). `record_end`: where the
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
    """The entry in a payload whose CRC already held; InvalidRecordError when its fields do
    not."""
    index, epoch, kind, topic_bytes = _HEAD.unpack_from(payload, 0)
    if _HEAD.size + topic_bytes + _TAIL.size != len(payload):
        raise InvalidRecordError(f"topic length {topic_bytes} disagrees with payload length "
                                 f"{len(payload)}")
    if topic_bytes > TOPIC_BYTES_MAX:
        raise InvalidRecordError(f"topic of {topic_bytes} bytes")
    try:
        topic = bytes(payload[_HEAD.size:_HEAD.size + topic_bytes]).decode("utf-8")
        entry_kind = EntryKind(kind)
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidRecordError(str(exc)) from None
    if index < 0 or epoch < 0:
        raise InvalidRecordError(f"negative index {index} or epoch {epoch}")
    partition, base_offset, record_count, partitions, batch_bytes = _TAIL.unpack_from(
        payload, _HEAD.size + topic_bytes)
    if base_offset < 0:
        raise InvalidRecordError(f"negative base offset {base_offset}")
    return JournalEntry(index, epoch, entry_kind, topic, partition, base_offset, record_count,
                        partitions, batch_bytes)



def file_head(snapshot: Snapshot) -> bytes:
    """Header (and, once compacted, the snapshot) of a journal file."""
    if snapshot.end == 0:
        return FILE_HEADER.pack(JOURNAL_MAGIC, JOURNAL_FORMAT_VERSION, 0)
    payload = snapshot.encode()
    return (FILE_HEADER.pack(JOURNAL_MAGIC, JOURNAL_FORMAT_VERSION_COMPACTED, 0)
            + RECORD_PREFIX.pack(len(payload), crc32c.crc32c(payload)) + payload)



def identified(entry: JournalEntry, incarnations: dict[str, TopicId]) -> JournalEntry:
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


def snapshot_incarnations(snapshot: Snapshot) -> dict[str, TopicId]:
    return {topic.name: TopicId(topic.id_epoch, topic.id_index) for topic in snapshot.topics}


def incarnations(snapshot: Snapshot, entries: list[JournalEntry]) -> dict[str, TopicId]:
    incarnations = snapshot_incarnations(snapshot)
    incarnations.update((entry.topic, entry.topic_id) for entry in entries
                        if entry.kind is EntryKind.CREATE_TOPIC)
    return incarnations
