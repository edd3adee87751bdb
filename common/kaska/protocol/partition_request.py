"""The (topic, partition) body several APIs share, and the (topic, partition, offset) one."""

from __future__ import annotations

from dataclasses import dataclass

from common.kaska.protocol.codec import BodyReader, BodyWriter


@dataclass(frozen=True, slots=True)
class TopicPartition:
    topic: str
    partition: int

    def write(self, writer: BodyWriter) -> BodyWriter:
        return writer.string(self.topic).u32(self.partition)

    @classmethod
    def read(cls, reader: BodyReader) -> TopicPartition:
        return cls(reader.string("topic"), reader.u32("partition"))
