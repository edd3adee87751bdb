"""LIST_OFFSETS.  Request: str topic | u32 partition.
Response: i64 log_start_offset | i64 log_end_offset (the high watermark: what consumers see)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from common.kaska.errors import InvalidResponseError
from common.kaska.protocol.codec import BodyReader, BodyWriter
from common.kaska.protocol.frames import Api
from common.kaska.protocol.partition_request import TopicPartition


@dataclass(frozen=True, slots=True)
class ListOffsetsRequest:
    API: ClassVar[Api] = Api.LIST_OFFSETS
    topic: str
    partition: int

    def encode(self) -> bytes:
        return TopicPartition(self.topic, self.partition).write(BodyWriter()).getvalue()

    @classmethod
    def decode(cls, buf) -> ListOffsetsRequest:
        reader = BodyReader(buf)
        tp = TopicPartition.read(reader)
        reader.finish()
        return cls(tp.topic, tp.partition)


@dataclass(frozen=True, slots=True)
class ListOffsetsResponse:
    log_start_offset: int
    log_end_offset: int

    def encode(self) -> bytes:
        return BodyWriter().i64(self.log_start_offset).i64(self.log_end_offset).getvalue()

    @classmethod
    def decode(cls, buf) -> ListOffsetsResponse:
        reader = BodyReader(buf, InvalidResponseError)
        response = cls(reader.i64("log_start_offset"), reader.i64("log_end_offset"))
        reader.finish()
        return response
