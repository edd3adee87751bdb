"""Kafka's record, as Kaska stores it when it came through the Kafka listener.

A batch produced through Kafka's protocol is stored as an ordinary Kaska batch (record_batch.py)
whose `attributes` carry `ATTR_KAFKA_RECORDS`: each Kaska record is then the body of one Kafka
record (RecordBatch v2), byte for byte -- everything after the record's own varint length:

    attributes      i8       unused by Kafka today (0)
    timestampDelta  varlong  record timestamp - the batch's first timestamp (Kaska timestamp_ms)
    offsetDelta     varint   record offset - batch base offset; always its index in the batch
    keyLength       varint   -1: null key
    key             bytes
    valueLength     varint   -1: null value (a tombstone)
    value           bytes
    headerCount     varint
    headers         headerCount x (keyLength varint | key | valueLength varint | value)

Varints are zigzag-encoded (Kafka's, protobuf's sint64). Keeping the body verbatim means the
Kafka listener never decodes keys, values or headers to store or serve them, and nothing a Kafka
client sent is lost; a Kaska consumer sees the record's value (`record_value`; a null value
reads as b"").

Everything here is pure and thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.kaska.errors import CorruptBatchError

ATTR_KAFKA_RECORDS = 0x0001
VARINT_BYTES_MAX = 10  # a 64-bit zigzag varint takes at most 10 bytes
NULL_LENGTH = -1


def read_varint(buf, pos: int) -> tuple[int, int]:
    """(signed value, next position) of the zigzag varint at buf[pos]; CorruptBatchError when
    it runs past the buffer, past 10 bytes or past 64 bits (as Kafka's own reader, and the C
    walker of services/broker/kafka/_record_walk.c)."""
    if pos < len(buf):
        first = buf[pos]
        if first < 0x80:  # one byte: most lengths, deltas and counts (values in -64..63)
            return (first >> 1) ^ -(first & 1), pos + 1
    raw = 0
    shift = 0
    end = len(buf)
    for index in range(VARINT_BYTES_MAX):
        if pos >= end:
            raise CorruptBatchError("varint runs past the end of the record")
        byte = buf[pos]
        pos += 1
        if index == VARINT_BYTES_MAX - 1 and byte > 1:
            if byte & 0x80:
                break
            raise CorruptBatchError("varint exceeds 64 bits")
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
    raise CorruptBatchError(f"varint longer than {VARINT_BYTES_MAX} bytes")


def encode_varint(value: int) -> bytes:
    """The zigzag varint of a signed 64-bit value."""
    raw = ((value << 1) ^ (value >> 63)) & 0xFFFF_FFFF_FFFF_FFFF
    out = bytearray()
    while raw > 0x7F:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


@dataclass(frozen=True, slots=True)
class RecordPrefix:
    """The fixed-order fields in front of a record body's key."""

    timestamp_delta: int
    offset_delta: int
    key_at: int  # position of keyLength in the body


def read_prefix(body) -> RecordPrefix:
    if len(body) < 1:
        raise CorruptBatchError("empty Kafka record")
    timestamp_delta, pos = read_varint(body, 1)
    offset_delta, pos = read_varint(body, pos)
    return RecordPrefix(timestamp_delta, offset_delta, pos)


def _skip_bytes(body, pos: int) -> tuple[int, int, int]:
    """(start, length, next position) of a varint-length-prefixed field (length -1: null)."""
    length, pos = read_varint(body, pos)
    if length < NULL_LENGTH:
        raise CorruptBatchError(f"negative field length {length} in a Kafka record")
    size = max(length, 0)
    if pos + size > len(body):
        raise CorruptBatchError("a Kafka record field runs past the record")
    return pos, length, pos + size


def record_value(body) -> bytes:
    """The value of one stored Kafka record body (b"" for a null value)."""
    prefix = read_prefix(body)
    _key_start, _key_length, pos = _skip_bytes(body, prefix.key_at)
    start, length, _end = _skip_bytes(body, pos)
    return bytes(body[start:start + max(length, 0)])


def check_record(body, expected_offset_delta: int) -> int:
    """Walk one record body whole (key, value, every header); its timestamp delta.
    CorruptBatchError when a field runs past the body, bytes are left over, or its offset
    delta is not its index in the batch (offsets must stay dense).

    The produce path's hot loop (once per record): it calls read_varint directly rather than
    through the helpers above, which halves its cost in CPython."""
    end = len(body)
    if end < 1:
        raise CorruptBatchError("empty Kafka record")
    timestamp_delta, pos = read_varint(body, 1)
    offset_delta, pos = read_varint(body, pos)
    if offset_delta != expected_offset_delta:
        raise CorruptBatchError(f"record offset delta {offset_delta}, expected "
                                f"{expected_offset_delta}")
    for _field in range(2):  # key, then value
        length, pos = read_varint(body, pos)
        if length > 0:
            pos += length
        elif length < NULL_LENGTH:
            raise CorruptBatchError(f"negative field length {length} in a Kafka record")
    header_count, pos = read_varint(body, pos)
    if header_count < 0:
        raise CorruptBatchError(f"negative header count {header_count}")
    for _ in range(2 * header_count):  # each header: key, then value
        if pos > end:
            break
        length, pos = read_varint(body, pos)
        if length < NULL_LENGTH:
            raise CorruptBatchError(f"negative field length {length} in a Kafka record")
        pos += max(length, 0)
    if pos != end:
        raise CorruptBatchError(f"a Kafka record's fields end at byte {pos}, the record at "
                                f"{end}")
    return timestamp_delta


def encode_value_record(offset_delta: int, value) -> bytes:
    """A Kafka record body for a Kaska record: timestamp delta 0, null key, no headers."""
    return b"".join((b"\x00", b"\x00", encode_varint(offset_delta), b"\x01",
                     encode_varint(len(value)), bytes(value), b"\x00"))
