"""Finding an offset by timestamp in a partition's log (ListOffsets with a timestamp, KIP-79):
the earliest record from the log start, in the batches wholly below a bound (the high
watermark), whose timestamp is at or after the target -- Kafka's answer: the first batch whose
timestamps reach the target, then its first record that does. None when no record does.

A batch's timestamp in the segments' indexes is its header's (time_index.py): every record of a
Kaska batch carries it; a Kafka batch's records carry their own (the header's plus the record's
delta), the header's being the first record's. So the search finds the first batch stamped at
or after the target through the segments' largest timestamps and time indexes, then looks into
the records of the batch just before it -- a Kafka batch whose later records reach the target
-- and of that batch itself. Exact for Kaska batches, and for Kafka batches whose records'
timestamps do not run past the next batch's first (one producer's records in produce order);
otherwise a record of an older batch stamped later than a newer batch's first may be passed
over, where Kafka (which indexes each batch's largest timestamp) would answer it.

Reads only, lock-free as PartitionLog.read: a pread per batch header walked (at most an index
interval's worth in the segment that holds the answer), and one of each candidate Kafka batch.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections.abc import Iterator, Sequence

from common.kaska.kafka_compression import CODEC_NONE, codec_of, compressed_bodies
from common.kaska.kafka_record import ATTR_KAFKA_RECORDS, read_prefix
from common.kaska.record_batch import HEADER_BYTES, RECORD_LENGTH_BYTES, BatchHeader
from services.broker.storage.segment import LogSegment

_RECORD_LEN = struct.Struct(">I")

Found = tuple[int, int]  # (timestamp_ms, offset)
_Batch = tuple[LogSegment, BatchHeader, int]  # (segment, header, position)


def offset_for_timestamp(
    segments: Sequence[LogSegment], start_offset: int, upto_offset: int, timestamp_ms: int
) -> Found | None:
    """(timestamp, offset) of the first record at or after `timestamp_ms`; see the module
    docstring. `segments`: the log's, in order."""
    if upto_offset <= start_offset or not segments:
        return None
    previous: _Batch | None = None
    for batch in _batches_from(
        segments, _walk_start(segments, start_offset, upto_offset, timestamp_ms)
    ):
        _segment, header, _position = batch
        if header.next_offset > upto_offset:
            break  # not wholly committed yet
        if header.next_offset <= start_offset:
            continue
        if header.timestamp_ms < timestamp_ms:
            previous = batch
            continue
        for candidate in (previous, batch):
            found = candidate and _first_record_at_or_after(candidate, timestamp_ms, start_offset)
            if found:
                return found
        previous = None  # a batch straddling the log start with no record to answer
    if previous is not None:
        return _first_record_at_or_after(previous, timestamp_ms, start_offset)
    return None


def _walk_start(
    segments: Sequence[LogSegment], start_offset: int, upto_offset: int, timestamp_ms: int
) -> int:
    """An offset at or before the batch preceding the first batch stamped at or after
    `timestamp_ms`: found through the segments' largest timestamps and time indexes; the last
    batch when no segment reaches it (a Kafka batch may still hold later records)."""
    for i, segment in enumerate(segments):
        if segment.next_offset <= start_offset or segment.max_timestamp_ms is None:
            continue
        if segment.max_timestamp_ms >= timestamp_ms:
            offset = segment.timestamp_search_start(timestamp_ms)
            if offset == segment.base_offset and i > 0:
                offset -= 1  # the previous segment's last batch
            return max(offset, start_offset)
    return max(upto_offset - 1, start_offset)


def _batches_from(segments: Sequence[LogSegment], offset: int) -> Iterator[_Batch]:
    bases = [segment.base_offset for segment in segments]
    first = max(bisect_right(bases, offset) - 1, 0)
    for segment in segments[first:]:
        for header, position in segment.headers_from(max(offset, segment.base_offset)):
            yield segment, header, position


def _first_record_at_or_after(batch: _Batch, timestamp_ms: int, start_offset: int) -> Found | None:
    segment, header, position = batch
    if not header.attributes & ATTR_KAFKA_RECORDS:
        if header.timestamp_ms >= timestamp_ms:
            return header.timestamp_ms, max(header.base_offset, start_offset)
        return None
    data = segment.read_bytes(position, header.total_bytes)
    if len(data) < header.total_bytes:
        return None  # cut under a racing reader (above the high watermark only)
    for offset, record_ms in record_timestamps(data, header):
        if offset >= start_offset and record_ms >= timestamp_ms:
            return record_ms, offset
    return None


def record_timestamps(batch: bytes, header: BatchHeader) -> Iterator[tuple[int, int]]:
    """(offset, timestamp) of every record of a stored, CRC-checked batch: the header's for a
    Kaska batch, the header's plus the record's delta for a Kafka batch (inflated first when
    its producer compressed it)."""
    if not header.attributes & ATTR_KAFKA_RECORDS:
        for index in range(header.record_count):
            yield header.base_offset + index, header.timestamp_ms
        return
    codec = codec_of(header.attributes)
    if codec != CODEC_NONE:  # inflated within the bound its produce was checked against
        payload = memoryview(batch)[HEADER_BYTES : header.total_bytes]
        for index, body in enumerate(compressed_bodies(payload, codec, header.record_count)):
            delta_ms = read_prefix(body).timestamp_delta
            yield header.base_offset + index, header.timestamp_ms + delta_ms
        return
    position = HEADER_BYTES
    for index in range(header.record_count):
        (length,) = _RECORD_LEN.unpack_from(batch, position)
        position += RECORD_LENGTH_BYTES
        body = memoryview(batch)[position : position + length]
        position += length
        yield header.base_offset + index, header.timestamp_ms + read_prefix(body).timestamp_delta
