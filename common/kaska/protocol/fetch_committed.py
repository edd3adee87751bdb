"""FETCH_COMMITTED: a consumer group's committed offset.
Request: str group | str topic | u32 partition.  Response: i64 offset (-1: none committed)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from common.kaska.errors import InvalidResponseError
from common.kaska.protocol.codec import BodyReader, BodyWriter
from common.kaska.protocol.frames import Api
from common.kaska.protocol.partition_request import TopicPartition

NO_COMMITTED_OFFSET = -1


@dataclass(frozen=True, slots=True)
class FetchCommittedRequest:
    API: ClassVar[Api] = Api.FETCH_COMMITTED
    group: str
    topic: str
    partition: int

    def encode(self) -> bytes:
        writer = BodyWriter().string(self.group)
        return TopicPartition(self.topic, self.partition).write(writer).getvalue()

    @classmethod
    def decode(cls, buf) -> FetchCommittedRequest:
        reader = BodyReader(buf)
        group = reader.string("group")
        tp = TopicPartition.read(reader)
        reader.finish()
        return cls(group, tp.topic, tp.partition)


@dataclass(frozen=True, slots=True)
class FetchCommittedResponse:
    offset: int

    def encode(self) -> bytes:
        return BodyWriter().i64(self.offset).getvalue()

    @classmethod
    def decode(cls, buf) -> FetchCommittedResponse:
        reader = BodyReader(buf, InvalidResponseError)
        response = cls(reader.i64("offset"))
        reader.finish()
        return response
