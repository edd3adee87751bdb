"""DELETE_TOPIC.  Request: str topic.  Response: empty."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from common.kaska.protocol.codec import BodyReader, BodyWriter
from common.kaska.protocol.frames import Api


@dataclass(frozen=True, slots=True)
class DeleteTopicRequest:
    API: ClassVar[Api] = Api.DELETE_TOPIC
    topic: str

    def encode(self) -> bytes:
        return BodyWriter().string(self.topic).getvalue()

    @classmethod
    def decode(cls, buf) -> DeleteTopicRequest:
        reader = BodyReader(buf)
        request = cls(reader.string("topic"))
        reader.finish()
        return request
