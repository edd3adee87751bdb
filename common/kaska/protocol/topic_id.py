"""A topic's incarnation on the wire: `i32 id_epoch | i64 id_index`, the (epoch, index) of the
metadata group's CREATE_TOPIC entry that made it (Kafka's topic ids, as a pair instead of a
UUID). Every broker derives the same id for the same incarnation, so a client may carry an id
it read from one broker to another. (-1, -1): a topic no CREATE_TOPIC made (internal ones).
Pure and thread-safe."""

from __future__ import annotations

from typing import NamedTuple

from common.kaska.errors import KaskaError
from common.kaska.protocol.codec import BodyReader, BodyWriter

TOPIC_ID_BYTES = 4 + 8
NO_TOPIC_ID_PART = -1


class TopicId(NamedTuple):
    """One incarnation of a topic: the (epoch, index) of the CREATE_TOPIC that made it."""

    epoch: int
    index: int

    def __str__(self) -> str:
        return f"{self.epoch}:{self.index}"


def write_topic_id(writer: BodyWriter, topic_id: TopicId | None) -> BodyWriter:
    if topic_id is None:
        return writer.i32(NO_TOPIC_ID_PART).i64(NO_TOPIC_ID_PART)
    return writer.i32(topic_id.epoch).i64(topic_id.index)


def read_topic_id(reader: BodyReader, error: type[KaskaError]) -> TopicId | None:
    """The id, None for (-1, -1); any other negative part raises `error`."""
    epoch, index = reader.i32("id_epoch"), reader.i64("id_index")
    if epoch == NO_TOPIC_ID_PART and index == NO_TOPIC_ID_PART:
        return None
    if epoch < 0 or index < 0:
        raise error(f"topic id {epoch}:{index} is out of range")
    return TopicId(epoch, index)
