"""CREATE_TOPIC.  Request: str topic | u32 partitions.

Version 0. Response: empty.
Version 1. Response: i32 id_epoch | i64 id_index, the incarnation the create made (what a
  version 1 DELETE_TOPIC names).
Either answer means the topic is committed (a majority holds it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from common.kaska.errors import InvalidResponseError, UnsupportedVersionError
from common.kaska.protocol.codec import BodyReader, BodyWriter
from common.kaska.protocol.frames import Api
from common.kaska.protocol.topic_id import TopicId, read_topic_id, write_topic_id

VERSIONS = frozenset({0, 1})
VERSION_LATEST = 1


@dataclass(frozen=True, slots=True)
class CreateTopicRequest:
    API: ClassVar[Api] = Api.CREATE_TOPIC
    topic: str
    partitions: int
    version: int = VERSION_LATEST

    def encode(self) -> bytes:
        return BodyWriter().string(self.topic).u32(self.partitions).getvalue()

    @classmethod
    def decode(cls, buf, version: int = 0) -> CreateTopicRequest:
        if version not in VERSIONS:
            raise UnsupportedVersionError(f"CREATE_TOPIC has no version {version}")
        reader = BodyReader(buf)
        request = cls(reader.string("topic"), reader.u32("partitions"), version)
        reader.finish()
        return request

    def decode_response(self, buf) -> CreateTopicResponse:
        return CreateTopicResponse.decode(buf, self.version)


@dataclass(frozen=True, slots=True)
class CreateTopicResponse:
    topic_id: TopicId | None = None  # None in version 0

    def encode(self, version: int = 0) -> bytes:
        if version == 0:
            return b""
        assert self.topic_id is not None, "a version 1 answer names the incarnation"
        return write_topic_id(BodyWriter(), self.topic_id).getvalue()

    @classmethod
    def decode(cls, buf, version: int = 0) -> CreateTopicResponse:
        reader = BodyReader(buf, InvalidResponseError)
        topic_id = read_topic_id(reader, InvalidResponseError) if version >= 1 else None
        if version >= 1 and topic_id is None:
            raise InvalidResponseError("a version 1 create answer names the incarnation")
        reader.finish()
        return cls(topic_id)
