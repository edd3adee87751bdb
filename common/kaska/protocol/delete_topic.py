"""DELETE_TOPIC.

Version 0. Request: str topic.  Response: empty.
  Deletes whatever incarnation of `topic` is live when the broker gets it.
Version 1. Request: str topic | i32 id_epoch | i64 id_index.  Response: empty.
  Deletes only the incarnation the id names (Kafka's DeleteTopics v6): when it is gone already
  the answer is success; when another incarnation of the name is live, UNKNOWN_TOPIC_ID and
  nothing is deleted. So a delete retried after a lost answer never deletes a topic of the
  same name someone created in between.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from common.kaska.errors import InvalidRequestError, UnsupportedVersionError
from common.kaska.protocol.codec import BodyReader, BodyWriter
from common.kaska.protocol.frames import Api, EmptyResponse
from common.kaska.protocol.topic_id import TopicId, read_topic_id, write_topic_id

VERSIONS = frozenset({0, 1})


@dataclass(frozen=True, slots=True)
class DeleteTopicRequest:
    API: ClassVar[Api] = Api.DELETE_TOPIC
    topic: str
    topic_id: TopicId | None = None  # None: any incarnation (version 0)

    @property
    def version(self) -> int:
        return 0 if self.topic_id is None else 1

    def encode(self) -> bytes:
        writer = BodyWriter().string(self.topic)
        if self.topic_id is not None:
            write_topic_id(writer, self.topic_id)
        return writer.getvalue()

    @classmethod
    def decode(cls, buf, version: int = 0) -> DeleteTopicRequest:
        if version not in VERSIONS:
            raise UnsupportedVersionError(f"DELETE_TOPIC has no version {version}")
        reader = BodyReader(buf)
        topic = reader.string("topic")
        topic_id = None
        if version == 1:
            topic_id = read_topic_id(reader, InvalidRequestError)
            if topic_id is None:
                raise InvalidRequestError("a version 1 delete names an incarnation")
        reader.finish()
        return cls(topic, topic_id)

    @staticmethod
    def decode_response(buf) -> EmptyResponse:
        return EmptyResponse.decode(buf)
