"""The record batch: the unit that travels from producer to log to consumer unchanged.

Wire and disk format (big-endian), `HEADER_BYTES` = 60:

    offset size field
    0      8    base_offset     i64  offset of the first record; stamped by the leader on append
    8      4    batch_length    u32  bytes that follow this field (whole batch = 12 + batch_length)
    12     4    leader_epoch    i32  stamped by the leader on append
    16     4    crc32c          u32  CRC32C of bytes [20, end): everything the producer wrote
    20     2    format_version  u16  FORMAT_VERSION
    22     2    attributes      u16  0, or ATTR_KAFKA_RECORDS: each record is a Kafka record body
                                     (kafka_record.py), read back as its value; with a codec
                                     in ATTR_CODEC_MASK too, the payload is instead one
                                     compressed Kafka batch (kafka_compression.py)
    24     4    record_count    u32  >= 1; offsets base_offset .. base_offset + record_count - 1
    28     16   producer_id     16 bytes (a UUID); all zero = not idempotent
    44     8    sequence        i64  per (producer, topic, partition), dense from 0; -1 = none
                                     (Kafka producer ids, `KAFKA_PRODUCER_PREFIX`, number their
                                     records instead, as Kafka's base sequence does)
    52     8    timestamp_ms    i64  producer wall clock
    60     ...  records         record_count times: u32 length | bytes (but see attributes)

Like Kafka's v2 batch, the CRC leaves out the fields the leader stamps (base offset, epoch), so
the broker assigns offsets by writing 12 bytes in place and never recomputes a checksum, never
parses a record. Everything here is pure and thread-safe.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import crc32c

from common.kaska.errors import CorruptBatchError
from common.kaska.kafka_compression import (
    CODEC_NONE,
    INFLATED_BYTES_MAX_DEFAULT,
    codec_of,
    compressed_values,
)
from common.kaska.kafka_record import ATTR_KAFKA_RECORDS, record_value

FORMAT_VERSION = 1
HEADER_BYTES = 60
LENGTH_FIELD_END = 12  # bytes up to and including batch_length
CRC_COVERED_FROM = 20
NO_PRODUCER = bytes(16)
# Producer ids minted for Kafka producers (services/broker/kafka/producer_ids.py) start with
# these 4 bytes; byte 6 is then 0, which a UUIDv4 (version nibble 4 there) never has.
KAFKA_PRODUCER_PREFIX = b"KFK\x00"
NO_SEQUENCE = -1
RECORD_LENGTH_BYTES = 4

_HEADER = struct.Struct(">qIiIHHI16sqq")
_STAMP = struct.Struct(">q")
_EPOCH = struct.Struct(">i")
_RECORD_LEN = struct.Struct(">I")
assert _HEADER.size == HEADER_BYTES


@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    leader_epoch: int
    crc: int
    format_version: int
    attributes: int
    record_count: int
    producer_id: bytes
    sequence: int
    timestamp_ms: int

    @property
    def total_bytes(self) -> int:
        return LENGTH_FIELD_END + self.batch_length

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.record_count

    @property
    def idempotent(self) -> bool:
        return self.producer_id != NO_PRODUCER

    @property
    def counts_records(self) -> bool:
        """True for a Kafka producer: its next batch's sequence is this one's plus its record
        count (Kafka's base sequence), not plus one."""
        return self.producer_id.startswith(KAFKA_PRODUCER_PREFIX)


def encode_batch(
    records: Sequence[bytes],
    *,
    producer_id: bytes = NO_PRODUCER,
    sequence: int = NO_SEQUENCE,
    timestamp_ms: int | None = None,
) -> bytes:
    """A new batch (base offset and epoch 0, for the leader to stamp) holding `records`."""
    if not records:
        raise ValueError("a batch holds at least one record")
    if len(producer_id) != 16:
        raise ValueError("producer_id is 16 bytes")
    if timestamp_ms is None:
        timestamp_ms = int(time.time() * 1000)
    # The checksum runs over the parts and the batch is joined once: building it in a growing
    # bytearray and copying it twice more cost 6 ms per 3 MB payload (a client's slice), ~1
    # CPU-s per 2M uploaded rows, against ~0.2 ms for one join.
    parts = [b""]  # the header, once its checksum is known
    for record in records:
        parts += (_RECORD_LEN.pack(len(record)), record)
    batch_length = HEADER_BYTES - LENGTH_FIELD_END + sum(len(part) for part in parts)
    head = bytearray(_HEADER.pack(
        0, batch_length, 0, 0, FORMAT_VERSION, 0, len(records), producer_id, sequence,
        timestamp_ms,
    ))
    crc = crc32c.crc32c(memoryview(head)[CRC_COVERED_FROM:])
    for part in parts[1:]:
        crc = crc32c.crc32c(part, value=crc)
    struct.pack_into(">I", head, 16, crc)
    parts[0] = head
    return b"".join(parts)


def peek_total_bytes(buf) -> int:
    """Whole size of the batch starting at buf[0], from its first 12 bytes (no validation)."""
    (batch_length,) = struct.unpack_from(">I", buf, 8)
    return LENGTH_FIELD_END + batch_length


def parse_header(buf, offset: int = 0) -> BatchHeader:
    """The header at buf[offset:]; raises CorruptBatchError if it cannot be one."""
    if len(buf) - offset < HEADER_BYTES:
        raise CorruptBatchError(f"batch header needs {HEADER_BYTES} bytes")
    header = BatchHeader(*_HEADER.unpack_from(buf, offset))
    if header.format_version != FORMAT_VERSION:
        raise CorruptBatchError(f"unknown batch format version {header.format_version}")
    if header.batch_length < HEADER_BYTES - LENGTH_FIELD_END:
        raise CorruptBatchError(f"batch length {header.batch_length} below the header size")
    if header.record_count < 1:
        raise CorruptBatchError("batch with no records")
    return header


def validate(buf, offset: int = 0) -> BatchHeader:
    """Header checks plus the CRC over the whole batch at buf[offset:]; reads, never copies."""
    header = parse_header(buf, offset)
    end = offset + header.total_bytes
    if end > len(buf):
        raise CorruptBatchError("batch runs past the end of the buffer")
    view = memoryview(buf)[offset + CRC_COVERED_FROM:end]
    try:
        actual = crc32c.crc32c(view)
    finally:
        view.release()
    if actual != header.crc:
        raise CorruptBatchError(f"CRC32C mismatch: stored {header.crc:#x}, computed {actual:#x}")
    return header


def stamp(buf, base_offset: int, leader_epoch: int, offset: int = 0) -> None:
    """Write the leader's fields into a writable batch in place (CRC unaffected)."""
    _STAMP.pack_into(buf, offset, base_offset)
    _EPOCH.pack_into(buf, offset + 12, leader_epoch)


def iter_records(batch, header: BatchHeader | None = None,
                 inflated_bytes_max: int = INFLATED_BYTES_MAX_DEFAULT
                 ) -> Iterator[tuple[int, bytes]]:
    """(offset, value) for every record of one validated batch; raises on inner corruption.
    A batch produced through Kafka's protocol yields each record's value (kafka_record.py),
    inflated here if its producer compressed it (at most `inflated_bytes_max` bytes per
    batch; kafka_compression.py)."""
    if header is None:
        header = parse_header(batch)
    codec = codec_of(header.attributes)
    if codec != CODEC_NONE:
        payload = memoryview(batch)[HEADER_BYTES:header.total_bytes]
        values = compressed_values(payload, codec, header.record_count, inflated_bytes_max)
        yield from enumerate(values, header.base_offset)
        return
    pos = HEADER_BYTES
    end = header.total_bytes
    view = memoryview(batch)
    kafka_records = bool(header.attributes & ATTR_KAFKA_RECORDS)
    for i in range(header.record_count):
        if pos + RECORD_LENGTH_BYTES > end:
            raise CorruptBatchError("record length runs past the batch")
        (length,) = _RECORD_LEN.unpack_from(batch, pos)
        pos += RECORD_LENGTH_BYTES
        if pos + length > end:
            raise CorruptBatchError("record runs past the batch")
        record = view[pos:pos + length]
        yield header.base_offset + i, (record_value(record) if kafka_records
                                       else bytes(record))
        pos += length
    if pos != end:
        raise CorruptBatchError("bytes left over after the last record")


def iter_batches(buf) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Consecutive whole batches in a fetch answer; a trailing partial batch is ignored, as
    Kafka consumers do (a fetch may stop mid-batch at its byte limit)."""
    view = memoryview(buf)
    pos = 0
    while len(buf) - pos >= LENGTH_FIELD_END:
        total = peek_total_bytes(view[pos:])
        if pos + total > len(buf):
            return
        header = validate(view, pos)
        yield header, view[pos:pos + total]
        pos += total
