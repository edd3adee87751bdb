"""LIST_TOPICS.  Request: u8 include_internal.

Version 0. Response: u32 n | n × (str topic | u32 partitions).
Version 1. Response: u32 n | n × (str topic | u32 partitions | i32 id_epoch | i64 id_index),
  each topic with its incarnation ((-1, -1) for an internal topic, which no CREATE made).

Answered by the metadata group's leader while it holds its lease, from its committed topics:
every create or delete acknowledged before the request is in the answer, and a create that is
not committed never is. Any other broker answers NOT_LEADER naming that leader.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from common.kaska.errors import InvalidResponseError, UnsupportedVersionError
from common.kaska.protocol.codec import BodyReader, BodyWriter
from common.kaska.protocol.frames import Api
from common.kaska.protocol.topic_id import (
    TOPIC_ID_BYTES,
    TopicId,
    read_topic_id,
    write_topic_id,
)

VERSIONS = frozenset({0, 1})
VERSION_LATEST = 1
_TOPIC_ENTRY_BYTES_MIN = 2 + 4


@dataclass(frozen=True, slots=True)
class ListTopicsRequest:
    API: ClassVar[Api] = Api.LIST_TOPICS
    include_internal: bool = False
    version: int = VERSION_LATEST

    def encode(self) -> bytes:
        return BodyWriter().flag(self.include_internal).getvalue()

    @classmethod
    def decode(cls, buf, version: int = 0) -> ListTopicsRequest:
        if version not in VERSIONS:
            raise UnsupportedVersionError(f"LIST_TOPICS has no version {version}")
        reader = BodyReader(buf)
        request = cls(reader.flag("include_internal"), version)
        reader.finish()
        return request

    def decode_response(self, buf) -> ListTopicsResponse:
        return ListTopicsResponse.decode(buf, self.version)


@dataclass(frozen=True, slots=True)
class ListTopicsResponse:
    topics: dict[str, int]  # name -> partitions
    topic_ids: dict[str, TopicId | None] = field(default_factory=dict)  # version 1 only

    def encode(self, version: int = 0) -> bytes:
        writer = BodyWriter().u32(len(self.topics))
        for name, partitions in sorted(self.topics.items()):
            writer.string(name).u32(partitions)
            if version >= 1:
                write_topic_id(writer, self.topic_ids.get(name))
        return writer.getvalue()

    @classmethod
    def decode(cls, buf, version: int = 0) -> ListTopicsResponse:
        reader = BodyReader(buf, InvalidResponseError)
        entry_bytes_min = _TOPIC_ENTRY_BYTES_MIN + (TOPIC_ID_BYTES if version >= 1 else 0)
        topics, topic_ids = {}, {}
        for _ in range(reader.count(entry_bytes_min, "topics")):
            name = reader.string("topic")
            topics[name] = reader.u32("partitions")
            if version >= 1:
                topic_ids[name] = read_topic_id(reader, InvalidResponseError)
        reader.finish()
        return cls(topics, topic_ids)
