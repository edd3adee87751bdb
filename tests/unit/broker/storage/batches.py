"""Batch builders and readers shared by the storage tests."""

from __future__ import annotations

import uuid

from common.kaska.record_batch import encode_batch, iter_batches, iter_records
from services.broker.storage.config import LogConfig

SMALL = LogConfig(segment_bytes_max=4096, index_interval_bytes=256, batch_bytes_max=2048)


def batch(*values: bytes, producer_id: bytes = bytes(16), sequence: int = -1,
          timestamp_ms: int = 1_000) -> bytes:
    return encode_batch(list(values), producer_id=producer_id, sequence=sequence,
                        timestamp_ms=timestamp_ms)


def sized_batch(total_bytes: int, tag: int = 0, **kwargs) -> bytes:
    """One single-record batch of exactly total_bytes (60 header + 4 length + value)."""
    value_bytes = total_bytes - 64
    assert value_bytes >= 1
    value = (b"%d:" % tag + b"v" * value_bytes)[:value_bytes]
    return batch(value, **kwargs)


def new_producer_id() -> bytes:
    return uuid.uuid4().bytes


def records(data: bytes) -> list[tuple[int, bytes]]:
    """(offset, value) of every record in a fetch answer."""
    return [rec for _, view in iter_batches(data) for rec in iter_records(view)]
