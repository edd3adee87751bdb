"""Kafka RecordBatch v2 test batches, built and read by kafka-python's own record codec (an
independent implementation to check ours against)."""

from __future__ import annotations

import struct

import crc32c
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

BASE_TIMESTAMP_MS = 1_700_000_000_000


def kafka_batch(records, *, producer_id: int = -1, epoch: int = -1, base_sequence: int = -1,
                compression: int = 0, transactional: bool = False) -> bytes:
    """`records`: (key, value, headers) tuples; timestamps base + 10 * index."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=compression, is_transactional=transactional,
        producer_id=producer_id, producer_epoch=epoch, base_sequence=base_sequence,
        batch_size=1 << 24)
    for index, (key, value, headers) in enumerate(records):
        builder.append(index, timestamp=BASE_TIMESTAMP_MS + 10 * index, key=key, value=value,
                       headers=headers)
    return bytes(builder.build())


def read_kafka(batch: bytes):
    """(kafka-python's DefaultRecordBatch, its records) after checking its CRC."""
    parsed = DefaultRecordBatch(bytes(batch))
    assert parsed.validate_crc()
    return parsed, list(parsed)


def recrc(batch: bytearray) -> bytes:
    """The batch with its CRC32C recomputed (to forge well-checksummed bad batches)."""
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)
