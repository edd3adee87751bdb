"""LIST_TOPICS.  Request: u8 include_internal.
Response: u32 n | n × (str topic | u32 partitions)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from common.kaska.errors import InvalidResponseError
from common.kaska.protocol.codec import BodyReader, BodyWriter
from common.kaska.protocol.frames import Api

_TOPIC_ENTRY_BYTES_MIN = 2 + 4


@dataclass(frozen=True, slots=True)
class ListTopicsRequest:
    API: ClassVar[Api] = Api.LIST_TOPICS
    include_internal: bool = False

    def encode(self) -> bytes:
        return BodyWriter().flag(self.include_internal).getvalue()

    @classmethod
    def decode(cls, buf) -> ListTopicsRequest:
        reader = BodyReader(buf)
        request = cls(reader.flag("include_internal"))
        reader.finish()
        return request


@dataclass(frozen=True, slots=True)
class ListTopicsResponse:
    topics: dict[str, int]

    def encode(self) -> bytes:
        writer = BodyWriter().u32(len(self.topics))
        for name, partitions in sorted(self.topics.items()):
            writer.string(name).u32(partitions)
        return writer.getvalue()

    @classmethod
    def decode(cls, buf) -> ListTopicsResponse:
        reader = BodyReader(buf, InvalidResponseError)
        topics = {}
        for _ in range(reader.count(_TOPIC_ENTRY_BYTES_MIN, "topics")):
            name = reader.string("topic")
            topics[name] = reader.u32("partitions")
        reader.finish()
        return cls(topics)
