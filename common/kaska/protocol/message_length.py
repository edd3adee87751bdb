"""MESSAGE_LENGTH: the byte length of the record at an offset.
Request: str topic | u32 partition | i64 offset.  Response: u32 length."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from common.kaska.errors import InvalidResponseError
from common.kaska.protocol.codec import BodyReader, BodyWriter
from common.kaska.protocol.frames import Api
from common.kaska.protocol.partition_request import TopicPartition


@dataclass(frozen=True, slots=True)
class MessageLengthRequest:
    API: ClassVar[Api] = Api.MESSAGE_LENGTH
    topic: str
    partition: int
    offset: int

    def encode(self) -> bytes:
        writer = TopicPartition(self.topic, self.partition).write(BodyWriter())
        return writer.i64(self.offset).getvalue()

    @classmethod
    def decode(cls, buf) -> MessageLengthRequest:
        reader = BodyReader(buf)
        tp = TopicPartition.read(reader)
        request = cls(tp.topic, tp.partition, reader.i64("offset"))
        reader.finish()
        return request


@dataclass(frozen=True, slots=True)
class MessageLengthResponse:
    length: int

    def encode(self) -> bytes:
        return BodyWriter().u32(self.length).getvalue()

    @classmethod
    def decode(cls, buf) -> MessageLengthResponse:
        reader = BodyReader(buf, InvalidResponseError)
        response = cls(reader.u32("length"))
        reader.finish()
        return response
