"""What a consumer's poll returns: one record and where it came from."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Message:
    topic: str
    partition: int
    offset: int
    value: bytes
    producer_id: bytes  # 16 bytes (a UUID); all zero when the producer was not idempotent
    sequence: int  # the batch's sequence number (the message id), -1 when none
    timestamp_ms: int  # the producer's clock when it built the batch
