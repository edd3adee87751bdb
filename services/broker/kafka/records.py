"""Transcoding between Kafka's RecordBatch v2 and Kaska's record batch, at the listener's edge.

The log keeps Kaska's format (docs/kafka.md, "On-disk format"). Kafka's batch (big-endian):

    0   8  baseOffset            i64   (stamped by the broker)
    8   4  batchLength           i32   bytes after this field
    12  4  partitionLeaderEpoch  i32
    16  1  magic                 i8    2
    17  4  crc                   u32   CRC32C of bytes [21, end)
    21  2  attributes            i16   bits 0-2 compression, 3 timestamp type, 4 transactional,
                                        5 control
    23  4  lastOffsetDelta       i32
    27  8  baseTimestamp         i64
    35  8  maxTimestamp          i64
    43  8  producerId            i64
    51  2  producerEpoch         i16
    53  4  baseSequence          i32
    57  4  recordCount           i32
    61  .. records               recordCount x (varint length | record body)

Kafka -> Kaska (produce): one non-transactional batch per partition, CRC checked, every record
walked whole (kafka_record.check_record). Uncompressed, it is stored as a Kaska batch with
ATTR_KAFKA_RECORDS whose records are the Kafka record bodies verbatim, timestamp_ms =
baseTimestamp, producer id and sequence per producer_ids.py. Compressed (gzip, snappy, lz4,
zstd), its records are inflated first -- at most `records_bytes_max` of them: a small batch must
not inflate into gigabytes (common/kaska/kafka_compression.py) -- and walked the same way, then
thrown away: the batch is stored compressed, the Kafka batch from its CRC field on as the Kaska
payload, the codec in the Kaska attributes. Kaska -> Kafka (fetch): the header rebuilt
(offsets, leader epoch and producer identity from the Kaska header, maxTimestamp from the
records' deltas), the record bodies prefixed with varint lengths -- or, for a batch a Kaska
producer wrote, one Kafka record per value (null key, no headers, timestamp delta 0); a
compressed batch gets its first 17 bytes back (base offset, length, leader epoch, magic) and is
otherwise served as the producer sent it.

Both directions also come as two parts, (header, records), for the broker's own paths: a batch
is ~1 MB, and joining the parts would copy it twice more (the header into a buffer with the
records, then the buffer into bytes) before the storage or the socket copies it again. The
CRC runs over the parts in order (crc32c continues from a running value).

Pure; thread-safe.
"""

from __future__ import annotations

import struct

import crc32c

from common.kaska.errors import CorruptBatchError
from common.kaska.kafka_compression import (
    CODEC_NAMES,
    CODEC_NONE,
    KAFKA_CODEC_MASK,
    codec_attributes,
    codec_of,
    inflate,
    kafka_tail,
)
from common.kaska.kafka_record import (
    ATTR_KAFKA_RECORDS,
    check_record,
    encode_value_record,
    encode_varint,
    read_prefix,
    read_varint,
)
from common.kaska.record_batch import (
    CRC_COVERED_FROM,
    FORMAT_VERSION,
    HEADER_BYTES,
    LENGTH_FIELD_END,
    NO_SEQUENCE,
    RECORD_LENGTH_BYTES,
    BatchHeader,
)
from services.broker.kafka.errors import (
    INVALID_RECORD,
    UNSUPPORTED_COMPRESSION_TYPE,
    UNSUPPORTED_FOR_MESSAGE_FORMAT,
    UnsupportedRecordsError,
)
from services.broker.kafka.producer_ids import kafka_producer, kaska_producer_id

try:  # the per-record loops in C (_record_walk.c; built by `make build`, see setup.py)
    from services.broker.kafka import _record_walk as native
except ImportError:  # built without a C compiler: the Python loops below do the same, slower
    native = None

KAFKA_HEADER = struct.Struct(">qiibIhiqqqhii")
KAFKA_HEADER_BYTES = 61
KAFKA_LENGTH_FIELD_END = 12
KAFKA_CRC_COVERED_FROM = 21
MAGIC_V2 = 2
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
assert KAFKA_HEADER.size == KAFKA_HEADER_BYTES

_KASKA_HEADER = struct.Struct(">qIiIHHI16sqq")
_KAFKA_FRONT = struct.Struct(">qiib")  # what a compressed batch is served with (fetch)
_RECORD_LEN = struct.Struct(">I")
_CRC = struct.Struct(">I")
_KASKA_CRC_AT = 16
_KAFKA_CRC_AT = 17
assert _KAFKA_FRONT.size == _KAFKA_CRC_AT


def kafka_to_kaska(records, records_bytes_max: int = 1 << 30) -> bytes:
    """One Kaska batch (unstamped) holding the one Kafka batch `records`; CorruptBatchError
    (CORRUPT_MESSAGE), MessageTooLargeError (compressed records that inflate past
    `records_bytes_max`) or UnsupportedRecordsError when it cannot be stored."""
    return b"".join(kafka_to_kaska_parts(records, records_bytes_max))


def kafka_to_kaska_parts(records, records_bytes_max: int = 1 << 30
                         ) -> tuple[bytes, bytes | bytearray]:
    """kafka_to_kaska as (the Kaska header, its records): the batch is their concatenation."""
    view = memoryview(records)
    if len(view) < KAFKA_HEADER_BYTES:
        raise CorruptBatchError(f"{len(view)} bytes cannot hold a record batch header")
    (_base, batch_length, _epoch, magic, crc, attributes, last_delta, base_timestamp,
     _max_timestamp, producer_id, producer_epoch, base_sequence,
     count) = KAFKA_HEADER.unpack_from(view)
    _check_kind(magic, attributes)
    total = KAFKA_LENGTH_FIELD_END + batch_length
    if total > len(view) or batch_length < KAFKA_HEADER_BYTES - KAFKA_LENGTH_FIELD_END:
        raise CorruptBatchError(f"batch length {batch_length} does not fit {len(view)} bytes")
    if total < len(view):
        raise UnsupportedRecordsError("exactly one record batch per partition is allowed",
                                      INVALID_RECORD)
    if crc32c.crc32c(view[KAFKA_CRC_COVERED_FROM:]) != crc:
        raise CorruptBatchError("record batch CRC32C mismatch")
    if count < 1 or last_delta != count - 1:
        raise CorruptBatchError(f"record count {count} with last offset delta {last_delta}")
    codec = attributes & KAFKA_CODEC_MASK
    if codec == CODEC_NONE:
        body = _kaska_records(view, count)
    else:
        # Walked inflated (the walk's copy dropped), stored as sent: from the CRC field on.
        _kaska_records(memoryview(inflate(codec, view[KAFKA_HEADER_BYTES:], records_bytes_max)),
                       count, start=0)
        body = view[_KAFKA_CRC_AT:]
    pid = kaska_producer_id(producer_id, producer_epoch) if producer_id >= 0 else None
    if pid is not None and base_sequence < 0:
        raise CorruptBatchError(f"idempotent batch with base sequence {base_sequence}")
    return _kaska_batch_parts(body, count, pid, base_sequence, base_timestamp,
                              codec_attributes(codec))


def _check_kind(magic: int, attributes: int) -> None:
    if magic != MAGIC_V2:
        raise UnsupportedRecordsError(f"message format (magic) {magic}; only v2 is stored",
                                      UNSUPPORTED_FOR_MESSAGE_FORMAT)
    if attributes & KAFKA_CODEC_MASK not in CODEC_NAMES:
        raise UnsupportedRecordsError(f"compression codec {attributes & KAFKA_CODEC_MASK} "
                                      "is none of Kafka's (gzip, snappy, lz4, zstd)",
                                      UNSUPPORTED_COMPRESSION_TYPE)
    if attributes & (TRANSACTIONAL_BIT | CONTROL_BIT):
        raise UnsupportedRecordsError("transactional and control batches are not supported",
                                      INVALID_RECORD)


def _kaska_records(view: memoryview, count: int,
                   start: int = KAFKA_HEADER_BYTES) -> bytes | bytearray:
    """The Kafka records of a batch (from `start`: after its header, or 0 in the inflated
    records of a compressed one) as Kaska records (u32 length | Kafka record body)."""
    if native is None:
        return _kaska_records_py(view, count, start)
    try:
        return native.kaska_records(view, start, count)
    except ValueError as exc:
        raise CorruptBatchError(str(exc)) from None


def _kaska_records_py(view: memoryview, count: int,
                      start: int = KAFKA_HEADER_BYTES) -> bytearray:
    """_kaska_records in Python: the fallback, and the tests' oracle for the C loop."""
    out = bytearray()
    pos = start
    end = len(view)
    for index in range(count):
        length, pos = read_varint(view, pos)
        if length < 0 or pos + length > end:
            raise CorruptBatchError(f"record {index} of length {length} runs past the batch")
        record = view[pos:pos + length]
        check_record(record, index)
        out += _RECORD_LEN.pack(length)
        out += record
        pos += length
    if pos != end:
        raise CorruptBatchError(f"{end - pos} bytes after the last record")
    return out


def _kaska_batch_parts(body, count: int, producer_id: bytes | None, sequence: int,
                       timestamp_ms: int, attributes: int) -> tuple[bytes, bytes | bytearray]:
    batch_length = HEADER_BYTES - LENGTH_FIELD_END + len(body)
    header = bytearray(_KASKA_HEADER.pack(
        0, batch_length, 0, 0, FORMAT_VERSION, attributes, count,
        producer_id if producer_id is not None else bytes(16),
        sequence if producer_id is not None else NO_SEQUENCE, timestamp_ms))
    _CRC.pack_into(header, _KASKA_CRC_AT, _crc_of_parts(header, CRC_COVERED_FROM, body))
    return bytes(header), body


def kaska_to_kafka(batch, header: BatchHeader) -> bytes:
    """The Kafka batch a consumer gets for one stored (stamped, validated) Kaska batch."""
    return b"".join(kaska_to_kafka_parts(batch, header))


def kaska_to_kafka_parts(batch, header: BatchHeader) -> tuple[bytes, bytes]:
    """kaska_to_kafka as (the Kafka header, its records)."""
    codec = codec_of(header.attributes)
    if codec != CODEC_NONE:
        return _compressed_kafka_parts(memoryview(batch), header, codec)
    records, max_delta = _kafka_records(memoryview(batch), header)
    producer_id, epoch, sequence = kafka_producer(header.producer_id, header.sequence)
    count = header.record_count
    out = bytearray(KAFKA_HEADER.pack(
        header.base_offset, KAFKA_HEADER_BYTES - KAFKA_LENGTH_FIELD_END + len(records),
        header.leader_epoch, MAGIC_V2, 0, 0, count - 1, header.timestamp_ms,
        header.timestamp_ms + max_delta, producer_id, epoch, sequence, count))
    _CRC.pack_into(out, _KAFKA_CRC_AT, _crc_of_parts(out, KAFKA_CRC_COVERED_FROM, records))
    return bytes(out), records


def _compressed_kafka_parts(view: memoryview, header: BatchHeader,
                            codec: int) -> tuple[bytes, memoryview]:
    """A stored compressed Kafka batch as the producer sent it, but for its first 17 bytes
    (the offset and epoch it got here); its CRC is the producer's, which covers neither."""
    tail = view[HEADER_BYTES:header.total_bytes]
    stored_codec, stored_count = kafka_tail(tail)
    if (stored_codec, stored_count) != (codec, header.record_count):
        raise CorruptBatchError(f"stored Kafka batch says {stored_count} records of codec "
                                f"{stored_codec}, its header {header.record_count} of {codec}")
    front = _KAFKA_FRONT.pack(header.base_offset, len(tail) + _KAFKA_CRC_AT
                              - KAFKA_LENGTH_FIELD_END, header.leader_epoch, MAGIC_V2)
    return front, tail


def _crc_of_parts(header: bytearray, covered_from: int, body) -> int:
    """CRC32C of header[covered_from:] followed by body (the CRC field itself lies before
    covered_from in both formats, so its placeholder does not count)."""
    return crc32c.crc32c(body, crc32c.crc32c(memoryview(header)[covered_from:]))


def _kafka_records(view: memoryview, header: BatchHeader) -> tuple[bytes, int]:
    """The records of a stored batch as Kafka records (varint length | body), and the largest
    timestamp delta among them."""
    kafka_records = bool(header.attributes & ATTR_KAFKA_RECORDS)
    if native is None:
        return _kafka_records_py(view, header, kafka_records)
    try:
        return native.kafka_records(view, HEADER_BYTES, header.total_bytes, header.record_count,
                                    kafka_records)
    except ValueError as exc:
        raise CorruptBatchError(str(exc)) from None


def _kafka_records_py(view: memoryview, header: BatchHeader,
                      kafka_records: bool) -> tuple[bytes, int]:
    """_kafka_records in Python: the fallback, and the tests' oracle for the C loop."""
    parts: list[bytes] = []
    max_delta = 0
    pos = HEADER_BYTES
    end = header.total_bytes
    for index in range(header.record_count):
        if pos + RECORD_LENGTH_BYTES > end:
            raise CorruptBatchError("record length runs past the batch")
        (length,) = _RECORD_LEN.unpack_from(view, pos)
        pos += RECORD_LENGTH_BYTES
        if pos + length > end:
            raise CorruptBatchError("record runs past the batch")
        record = view[pos:pos + length]
        pos += length
        if kafka_records:
            max_delta = max(max_delta, read_prefix(record).timestamp_delta)
            body = bytes(record)
        else:
            body = encode_value_record(index, record)
        parts.append(encode_varint(len(body)))
        parts.append(body)
    return b"".join(parts), max_delta
