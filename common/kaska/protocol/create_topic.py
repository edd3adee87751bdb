"""CREATE_TOPIC.  Request: str topic | u32 partitions.  Response: empty."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from common.kaska.protocol.codec import BodyReader, BodyWriter
from common.kaska.protocol.frames import Api


@dataclass(frozen=True, slots=True)
class CreateTopicRequest:
    API: ClassVar[Api] = Api.CREATE_TOPIC
    topic: str
    partitions: int

    def encode(self) -> bytes:
        return BodyWriter().string(self.topic).u32(self.partitions).getvalue()

    @classmethod
    def decode(cls, buf) -> CreateTopicRequest:
        reader = BodyReader(buf)
        request = cls(reader.string("topic"), reader.u32("partitions"))
        reader.finish()
        return request
