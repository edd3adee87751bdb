"""ProducerStateTable: idempotent-producer deduplication for one partition (Kafka's
ProducerStateManager, without transactions).

State: producer id → its last `BATCHES_REMEMBERED` appended batches as (sequence, base offset,
record count), oldest first. One table per PartitionLog, so the (producer id, partition) key
of the design is (table, producer id). Sequence numbers count batches: a producer's batches on
one partition are numbered 0, 1, 2, ... -- except for the producer ids minted for Kafka
producers (`BatchHeader.counts_records`), whose sequences count records as Kafka's base
sequence does: the batch after (s, n records) has s + n, modulo 2^31 (Kafka's int32 wraps to 0).
"Last + 1" below means that successor.

Rules for an incoming batch (`check`):
- producer id all zero: not idempotent, always appended;
- unknown producer: any sequence is accepted (a producer may start mid-stream, e.g. after
  its earlier batches were deleted by retention or forgotten beyond `producer_ids_max`);
- sequence == last + 1: appended;
- sequence equal to a remembered one: a retry; answered with the original base offset and
  record count, nothing stored;
- sequence <= last but no longer remembered: DuplicateSequenceError;
- sequence > last + 1: OutOfOrderSequenceError (a batch in between was never stored).

Persistence (Kafka's producer snapshots): the table is rebuilt on open by feeding the batch
headers of the log to `load`; since retention deletes old segments, that alone would forget a
producer whose batches are all gone (a very late retry could then look new). So when a segment
rolls the partition writes `%020d.snapshot`, named by the new segment's base offset, holding
the table as it is at that offset (after every batch below it). On open the snapshot at the
first segment's base offset (if any, and valid) is loaded, then the headers of every segment
are fed: the result equals the table the partition had. Bounded: at most `producer_ids_max`
producers, least recently appended forgotten first (a snapshot keeps that order).

Snapshot file format (big-endian; written to `*.tmp` and renamed into place):

    0   4  magic            b"KPSN"
    4   2  format_version   SNAPSHOT_FORMAT_VERSION
    6   8  offset           i64, equal to the number in the file name
    14  4  producer_count   u32
    18  .. producer_count entries, least recently appended first:
              16  producer_id
              1   batch_count  u8, 1..BATCHES_REMEMBERED
              batch_count x (i64 sequence, i64 base_offset, u32 record_count), oldest first
    -4  4  crc32c           u32 over every byte before it

A snapshot that fails any check (torn, CRC, wrong offset) raises CorruptSnapshotError; the
partition then ignores it with a warning and rebuilds from the headers alone.

Thread-safety: none; the owning PartitionLog calls it under its lock.
"""

from __future__ import annotations

import logging
import os
import struct
from collections import OrderedDict, deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import crc32c

from common.kaska.errors import (
    CorruptBatchError,
    DuplicateSequenceError,
    OutOfOrderSequenceError,
)
from common.kaska.record_batch import BatchHeader
from services.broker.storage.errors import CorruptSnapshotError

log = logging.getLogger(__name__)

BATCHES_REMEMBERED = 5
KAFKA_SEQUENCE_MODULUS = 1 << 31
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_MAGIC = b"KPSN"
SNAPSHOT_FORMAT_VERSION = 1
_SNAPSHOT_HEADER = struct.Struct(">4sHqI")
_PRODUCER = struct.Struct(">16sB")
_BATCH = struct.Struct(">qqI")
_CRC = struct.Struct(">I")
_NAME_DIGITS = 20


@dataclass(frozen=True, slots=True)
class ProducerBatch:
    sequence: int
    base_offset: int
    record_count: int


class ProducerStateTable:
    def __init__(self, producer_ids_max: int):
        assert producer_ids_max >= 1
        self.producer_ids_max = producer_ids_max
        self._batches: OrderedDict[bytes, deque[ProducerBatch]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._batches)

    def check(self, header: BatchHeader) -> ProducerBatch | None:
        """None when the batch is to be appended, the original batch when it is a retry;
        raises DuplicateSequenceError / OutOfOrderSequenceError per the rules above."""
        if not header.idempotent:
            return None
        if header.sequence < 0:
            raise CorruptBatchError(f"idempotent batch with sequence {header.sequence}")
        batches = self._batches.get(header.producer_id)
        if not batches:
            return None
        last = batches[-1].sequence
        if header.sequence == _successor(batches[-1], header):
            return None
        for batch in batches:
            if batch.sequence == header.sequence:
                return batch
        if header.sequence <= last:
            raise DuplicateSequenceError(
                f"sequence {header.sequence} is older than the last {len(batches)} batches "
                f"remembered (last {last})")
        expected = _successor(batches[-1], header)
        unit = "record(s)" if header.counts_records else "batch(es)"
        raise OutOfOrderSequenceError(f"sequence {header.sequence} after {last}: expected "
                                      f"{expected}, {header.sequence - expected} {unit} missing")

    def record(self, header: BatchHeader, base_offset: int) -> None:
        """Remember an appended batch (after check said append, or when loading the log)."""
        if not header.idempotent:
            return
        pid = header.producer_id
        batches = self._batches.get(pid)
        if batches is None:
            batches = self._batches[pid] = deque(maxlen=BATCHES_REMEMBERED)
            if len(self._batches) > self.producer_ids_max:
                self._batches.popitem(last=False)
        else:
            self._batches.move_to_end(pid)
        batches.append(ProducerBatch(header.sequence, base_offset, header.record_count))

    def load(self, header: BatchHeader) -> None:
        """Feed one batch header of the log, in log order (rebuild on open)."""
        self.record(header, header.base_offset)

    def clear(self) -> None:
        self._batches.clear()

    def encode_snapshot(self, offset: int) -> bytes:
        """The table as a snapshot file's bytes (format above), taken at `offset`."""
        out = bytearray(_SNAPSHOT_HEADER.pack(SNAPSHOT_MAGIC, SNAPSHOT_FORMAT_VERSION, offset,
                                              len(self._batches)))
        for pid, batches in self._batches.items():
            out += _PRODUCER.pack(pid, len(batches))
            for batch in batches:
                out += _BATCH.pack(batch.sequence, batch.base_offset, batch.record_count)
        out += _CRC.pack(crc32c.crc32c(out))
        return bytes(out)

    def load_snapshot(self, data: bytes, offset: int) -> None:
        """Replace the table by a snapshot taken at `offset`; CorruptSnapshotError (table left
        empty) when `data` is not a valid one."""
        self._batches.clear()
        try:
            for pid, batches in _decode_snapshot(data, offset):
                self._batches[pid] = deque(batches, maxlen=BATCHES_REMEMBERED)
        except CorruptSnapshotError:
            self._batches.clear()
            raise
        while len(self._batches) > self.producer_ids_max:  # the bound may have shrunk
            self._batches.popitem(last=False)

    def last_sequence(self, producer_id: bytes) -> int | None:
        batches = self._batches.get(producer_id)
        return batches[-1].sequence if batches else None


def _successor(last: ProducerBatch, header: BatchHeader) -> int:
    """The sequence the producer's next batch must carry (see the module docstring)."""
    if header.counts_records:
        return (last.sequence + last.record_count) % KAFKA_SEQUENCE_MODULUS
    return last.sequence + 1


def _decode_snapshot(data: bytes, offset: int) -> Iterator[tuple[bytes, list[ProducerBatch]]]:
    """(producer id, batches) of a snapshot file's bytes, least recently appended first."""
    body_end = len(data) - _CRC.size
    if body_end < _SNAPSHOT_HEADER.size:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes is shorter than its header")
    (stored_crc,) = _CRC.unpack_from(data, body_end)
    if crc32c.crc32c(memoryview(data)[:body_end]) != stored_crc:
        raise CorruptSnapshotError("snapshot CRC32C mismatch")
    magic, version, stored_offset, count = _SNAPSHOT_HEADER.unpack_from(data, 0)
    if magic != SNAPSHOT_MAGIC or version != SNAPSHOT_FORMAT_VERSION:
        raise CorruptSnapshotError(f"not a version {SNAPSHOT_FORMAT_VERSION} producer snapshot")
    if stored_offset != offset:
        raise CorruptSnapshotError(f"snapshot says offset {stored_offset}, expected {offset}")
    position = _SNAPSHOT_HEADER.size
    seen: set[bytes] = set()
    for _ in range(count):
        if position + _PRODUCER.size > body_end:
            raise CorruptSnapshotError(f"snapshot announces {count} producers, holds fewer")
        pid, batch_count = _PRODUCER.unpack_from(data, position)
        position += _PRODUCER.size
        end = position + batch_count * _BATCH.size
        if not 1 <= batch_count <= BATCHES_REMEMBERED or end > body_end or pid in seen:
            raise CorruptSnapshotError(f"snapshot entry at byte {position} is malformed")
        seen.add(pid)
        yield pid, [ProducerBatch(*_BATCH.unpack_from(data, at))
                    for at in range(position, end, _BATCH.size)]
        position = end
    if position != body_end:
        raise CorruptSnapshotError(f"{body_end - position} bytes after the last snapshot entry")


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def is_snapshot_name(path: Path) -> bool:
    stem = path.stem
    return (path.suffix == SNAPSHOT_SUFFIX and len(stem) == _NAME_DIGITS and stem.isdigit()
            and stem.isascii())


class ProducerSnapshots:
    """The `%020d.snapshot` files of one partition directory (no lock: the partition's)."""

    def __init__(self, directory: Path):
        self.directory = directory

    def offsets(self) -> list[int]:
        return sorted(int(path.stem) for path in self.directory.iterdir()
                      if is_snapshot_name(path))

    def write(self, offset: int, table: ProducerStateTable, durable: bool) -> None:
        """Under a temporary name, then renamed: a snapshot file is whole or absent (up to a
        machine crash without `durable`, which the CRC then catches)."""
        path = snapshot_path(self.directory, offset)
        tmp = path.with_name(path.name + ".tmp")
        try:
            with open(tmp, "wb") as out:
                out.write(table.encode_snapshot(offset))
                if durable:
                    out.flush()
                    os.fsync(out.fileno())
        except BaseException:
            tmp.unlink(missing_ok=True)  # a full disk wants the blocks of a torn copy back
            raise
        os.replace(tmp, path)

    def load_into(self, table: ProducerStateTable, offset: int) -> bool:
        """Load the snapshot taken at `offset` into `table` (emptied first); False (logged when
        corrupt) when there is no valid one, the table then being empty."""
        table.clear()
        path = snapshot_path(self.directory, offset)
        try:
            table.load_snapshot(path.read_bytes(), offset)
        except FileNotFoundError:
            return False
        except CorruptSnapshotError as exc:
            log.warning("%s: %s; ignored, the producer table is rebuilt from the log", path, exc)
            return False
        return True

    def delete_all(self) -> None:
        for offset in self.offsets():
            snapshot_path(self.directory, offset).unlink(missing_ok=True)

    def delete_outside(self, low: int, high: int) -> None:
        """Delete every snapshot whose offset lies outside [low, high]."""
        for offset in self.offsets():
            if not low <= offset <= high:
                snapshot_path(self.directory, offset).unlink(missing_ok=True)
