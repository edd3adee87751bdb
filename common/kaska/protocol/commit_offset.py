"""COMMIT_OFFSET: a consumer group's position (the next offset it will read).
Request: str group | str topic | u32 partition | i64 offset.  Response: empty."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from common.kaska.protocol.codec import BodyReader, BodyWriter
from common.kaska.protocol.frames import Api
from common.kaska.protocol.partition_request import TopicPartition


@dataclass(frozen=True, slots=True)
class CommitOffsetRequest:
    API: ClassVar[Api] = Api.COMMIT_OFFSET
    group: str
    topic: str
    partition: int
    offset: int

    def encode(self) -> bytes:
        writer = BodyWriter().string(self.group)
        return TopicPartition(self.topic, self.partition).write(writer).i64(self.offset).getvalue()

    @classmethod
    def decode(cls, buf) -> CommitOffsetRequest:
        reader = BodyReader(buf)
        group = reader.string("group")
        tp = TopicPartition.read(reader)
        request = cls(group, tp.topic, tp.partition, reader.i64("offset"))
        reader.finish()
        return request
