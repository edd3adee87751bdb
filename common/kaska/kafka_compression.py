"""Kafka's compressed record batches, as Kaska keeps them, and their bounded decompression.

A compressed batch a Kafka producer sent is stored compressed (docs/kafka.md, "On-disk
format"): a Kaska batch (record_batch.py) whose `attributes` carry ATTR_KAFKA_RECORDS and the
codec in ATTR_CODEC_MASK (Kafka's own codec ids, shifted by one bit), and whose payload is the
Kafka batch from its CRC field on -- the part no Kafka broker rewrites -- byte for byte:

    0   4  crc                   u32  the producer's CRC32C of everything after it
    4   2  attributes            i16  the codec in bits 0-2
    6   4  lastOffsetDelta       i32
    10  8  baseTimestamp         i64
    18  8  maxTimestamp          i64
    26  8  producerId            i64
    34  2  producerEpoch         i16
    36  4  baseSequence          i32
    40  4  recordCount           i32
    44  .. records               compressed: recordCount x (varint length | record body)

Serving it to a Kafka consumer then takes a new 17-byte front (base offset, length, leader
epoch, magic) and nothing else; a Kaska consumer gets the values by inflating the records here,
on the reader's side (`compressed_values`).

Codecs (Kafka's ids): 1 gzip, 2 snappy (raw, as librdkafka writes it, or in the xerial
snappy-java block framing that Java's and kafka-python's producers write), 3 lz4 (the LZ4 frame
format), 4 zstd. Every codec is cramjam's (one Rust library, the one python-snappy is built
on); only the xerial framing -- a 16-byte magic header, then blocks of (i32 length | raw snappy)
-- is walked here, each block inflated by cramjam.

Bounded: decompression writes into a window of `inflated_bytes_max + 1` bytes (an anonymous
map: only the pages written cost memory; each thread keeps its own between batches, and at
most WINDOW_KEPT_BYTES of it written) and stops when it is full, so a small batch that
inflates into gigabytes costs at most the bound; a snappy block that declares more than the
window left is refused before it is inflated. Refusals: InflatedTooLargeError (a
MessageTooLargeError) past the bound, CorruptBatchError for anything that does not inflate.

Pure; thread-safe.
"""

from __future__ import annotations

import mmap
import struct
import threading

import cramjam

from common.kaska.errors import CorruptBatchError, MessageTooLargeError
from common.kaska.kafka_record import ATTR_KAFKA_RECORDS, read_varint, record_value

CODEC_NONE = 0
CODEC_GZIP = 1
CODEC_SNAPPY = 2
CODEC_LZ4 = 3
CODEC_ZSTD = 4
CODEC_NAMES = {
    CODEC_NONE: "none",
    CODEC_GZIP: "gzip",
    CODEC_SNAPPY: "snappy",
    CODEC_LZ4: "lz4",
    CODEC_ZSTD: "zstd",
}
KAFKA_CODEC_MASK = 0x07  # in a Kafka batch's attributes

ATTR_CODEC_SHIFT = 1  # in a Kaska batch's attributes, above ATTR_KAFKA_RECORDS
ATTR_CODEC_MASK = KAFKA_CODEC_MASK << ATTR_CODEC_SHIFT

# The stored Kafka batch from its CRC field on (module doc).
_KAFKA_TAIL = struct.Struct(">IhiqqqhiI")
KAFKA_TAIL_BYTES = 44
KAFKA_TAIL_CRC_BYTES = 4
assert _KAFKA_TAIL.size == KAFKA_TAIL_BYTES

# What a Kaska consumer inflates at most per batch: a broker refuses a Kafka batch that inflates
# past its batch_bytes_max (64 MiB by default), so this only has to be above any broker's.
INFLATED_BYTES_MAX_DEFAULT = 1 << 30
# Every Kafka record takes at least 7 bytes inflated (its length, attributes, timestamp delta,
# offset delta, key length, value length, header count: one byte each at the least), which
# bounds the record count of a compressed batch by the size it may inflate to.
KAFKA_RECORD_BYTES_MIN = 7

# What each thread's window (`_window`) keeps written between batches, at most: a broker's
# connection threads and a consumer's each hold one, so a large batch once must not pin its
# size for good. A multiple of the page size.
WINDOW_KEPT_BYTES = 8 << 20
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_BYTES = 16  # the magic, then version and compatible version (i32 each)
_BLOCK_LENGTH = struct.Struct(">i")
# What cramjam 2.14 raises when a decoder fills the window (Rust's io::ErrorKind::WriteZero)
# or a raw snappy block declares more than it: the bound, not corruption.
_WINDOW_FULL = ("failed to write whole buffer", "smaller than required")

_DECOMPRESS_INTO = {
    CODEC_GZIP: cramjam.gzip.decompress_into,
    CODEC_LZ4: cramjam.lz4.decompress_into,
    CODEC_ZSTD: cramjam.zstd.decompress_into,
}


class InflatedTooLargeError(MessageTooLargeError):
    """Compressed records that inflate (or claim to) past their bound."""


def codec_of(attributes: int) -> int:
    """The codec of a stored Kaska batch (CODEC_NONE for Kaska's and uncompressed Kafka's)."""
    if not attributes & ATTR_KAFKA_RECORDS:
        return CODEC_NONE
    return (attributes & ATTR_CODEC_MASK) >> ATTR_CODEC_SHIFT


def codec_attributes(codec: int) -> int:
    """The Kaska attributes of a stored Kafka batch of `codec`."""
    assert codec in CODEC_NAMES, codec
    return ATTR_KAFKA_RECORDS | codec << ATTR_CODEC_SHIFT


class _ThreadWindow(threading.local):
    window: mmap.mmap | None = None


_own = _ThreadWindow()


def inflate(codec: int, compressed, inflated_bytes_max: int) -> bytes:
    """The records of a compressed Kafka batch, inflated: at most inflated_bytes_max bytes
    (InflatedTooLargeError past it); CorruptBatchError when they do not inflate."""
    window = _window(inflated_bytes_max + 1)
    size = None
    try:
        size = _inflate_into(codec, compressed, window)
        if size > inflated_bytes_max:
            raise _too_large(codec, inflated_bytes_max)
        return window[:size]
    finally:
        if size is None or size > WINDOW_KEPT_BYTES:
            _hand_back(window)


def _window(size: int) -> mmap.mmap:
    """This thread's window of `size` bytes, kept between batches: a fresh map costs the
    faulting and zeroing of every page written, each time (CPU per MB inflated, 100-byte
    records: lz4 1.3 ms fresh against 0.3 kept, zstd 1.7 against 0.7)."""
    window = _own.window
    if window is None or len(window) != size:
        if window is not None:
            window.close()
        window = _own.window = mmap.mmap(-1, size)
    return window


def _hand_back(window: mmap.mmap) -> None:
    """Give back the pages past WINDOW_KEPT_BYTES (written by a large batch, or to an unknown
    extent by a refused one), so that a thread keeps at most that much between batches."""
    if len(window) > WINDOW_KEPT_BYTES:
        window.madvise(mmap.MADV_DONTNEED, WINDOW_KEPT_BYTES, len(window) - WINDOW_KEPT_BYTES)


def _inflate_into(codec: int, compressed, window: mmap.mmap) -> int:
    name = CODEC_NAMES.get(codec, str(codec))
    try:
        if codec == CODEC_SNAPPY:
            return _snappy_into(compressed, window)
        decompress_into = _DECOMPRESS_INTO.get(codec)
        if decompress_into is None:
            raise CorruptBatchError(f"unknown compression codec {codec}")
        return decompress_into(compressed, window)
    except cramjam.DecompressionError as exc:
        if any(text in str(exc) for text in _WINDOW_FULL):
            raise _too_large(codec, len(window) - 1) from None
        raise CorruptBatchError(f"{name} records do not inflate: {exc}") from None


def _too_large(codec: int, inflated_bytes_max: int) -> InflatedTooLargeError:
    return InflatedTooLargeError(
        f"{CODEC_NAMES[codec]} records inflate past {inflated_bytes_max} bytes"
    )


def _snappy_into(compressed, window: mmap.mmap) -> int:
    """Raw snappy, or xerial's blocks of raw snappy one after another into the window."""
    view = memoryview(compressed)
    if bytes(view[: len(_XERIAL_MAGIC)]) != _XERIAL_MAGIC:
        return cramjam.snappy.decompress_raw_into(view, window)
    if len(view) < _XERIAL_HEADER_BYTES:
        raise CorruptBatchError("xerial snappy header cut short")
    out = memoryview(window)
    try:
        pos, written = _XERIAL_HEADER_BYTES, 0
        while pos < len(view):
            if pos + _BLOCK_LENGTH.size > len(view):
                raise CorruptBatchError("xerial snappy block length cut short")
            (length,) = _BLOCK_LENGTH.unpack_from(view, pos)
            pos += _BLOCK_LENGTH.size
            if length < 0 or pos + length > len(view):
                raise CorruptBatchError(
                    f"xerial snappy block of {length} bytes runs past the records"
                )
            written += cramjam.snappy.decompress_raw_into(view[pos : pos + length], out[written:])
            pos += length
        return written
    finally:
        out.release()


def kafka_tail(payload) -> tuple[int, int]:
    """(codec, record count) the stored Kafka batch `payload` (module doc) declares."""
    if len(payload) < KAFKA_TAIL_BYTES:
        raise CorruptBatchError(f"{len(payload)} bytes cannot hold a stored Kafka batch")
    fields = _KAFKA_TAIL.unpack_from(payload)
    return fields[1] & KAFKA_CODEC_MASK, fields[-1]


def compressed_values(
    payload, codec: int, count: int, inflated_bytes_max: int = INFLATED_BYTES_MAX_DEFAULT
) -> list[bytes]:
    """The values of the `count` records of one stored compressed Kafka batch (a null value
    reads as b"", as for uncompressed ones); CorruptBatchError when the batch does not hold
    what its Kaska header says, InflatedTooLargeError past the bound."""
    return [
        record_value(body) for body in compressed_bodies(payload, codec, count, inflated_bytes_max)
    ]


def compressed_bodies(
    payload, codec: int, count: int, inflated_bytes_max: int = INFLATED_BYTES_MAX_DEFAULT
) -> list[memoryview]:
    """The record bodies of one stored compressed Kafka batch, inflated."""
    stored_codec, stored_count = kafka_tail(payload)
    if (stored_codec, stored_count) != (codec, count):
        raise CorruptBatchError(
            f"stored Kafka batch says {stored_count} {stored_codec}-records,"
            f" its header {count} {codec}-records"
        )
    records = memoryview(inflate(codec, memoryview(payload)[KAFKA_TAIL_BYTES:], inflated_bytes_max))
    bodies = []
    pos = 0
    for index in range(count):
        length, pos = read_varint(records, pos)
        if length < 0 or pos + length > len(records):
            raise CorruptBatchError(f"record {index} of length {length} runs past the records")
        bodies.append(records[pos : pos + length])
        pos += length
    if pos != len(records):
        raise CorruptBatchError(f"{len(records) - pos} bytes after the last record")
    return bodies
