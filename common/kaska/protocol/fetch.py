"""FETCH: whole record batches from an offset, long-polling up to max_wait_ms for new data.

Request:  str topic | u32 partition | i64 offset | u32 max_bytes | u32 max_wait_ms
Response: i64 high_watermark | i64 log_start_offset | record batches (the rest of the frame)

The batches are sent by the broker with `os.sendfile` straight from the segment files. The
first batch may start before `offset` (it is the batch holding it) and the last may exceed
`max_bytes` (at least one whole batch is returned, so a consumer always progresses).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from common.kaska.errors import InvalidResponseError
from common.kaska.protocol.codec import BodyReader, BodyWriter
from common.kaska.protocol.frames import Api

RESPONSE_PREFIX = struct.Struct(">qq")


@dataclass(frozen=True, slots=True)
class FetchRequest:
    API: ClassVar[Api] = Api.FETCH
    topic: str
    partition: int
    offset: int
    max_bytes: int
    max_wait_ms: int

    def encode(self) -> bytes:
        return (BodyWriter().string(self.topic).u32(self.partition).i64(self.offset)
                .u32(self.max_bytes).u32(self.max_wait_ms).getvalue())

    @classmethod
    def decode(cls, buf) -> FetchRequest:
        reader = BodyReader(buf)
        request = cls(reader.string("topic"), reader.u32("partition"), reader.i64("offset"),
                      reader.u32("max_bytes"), reader.u32("max_wait_ms"))
        reader.finish()
        return request


@dataclass(frozen=True, slots=True)
class FetchResponse:
    high_watermark: int
    log_start_offset: int
    records: bytes | memoryview

    def encode_prefix(self) -> bytes:
        """Everything before the batches, which the broker sends from its files."""
        return encode_response_prefix(self.high_watermark, self.log_start_offset)

    def encode(self) -> bytes:
        return self.encode_prefix() + bytes(self.records)

    @classmethod
    def decode(cls, buf) -> FetchResponse:
        reader = BodyReader(buf, InvalidResponseError)
        return cls(reader.i64("high_watermark"), reader.i64("log_start_offset"), reader.rest())


def encode_response_prefix(high_watermark: int, log_start_offset: int) -> bytes:
    return RESPONSE_PREFIX.pack(high_watermark, log_start_offset)
