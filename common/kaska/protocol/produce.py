"""PRODUCE: append one record batch to a partition.

Request:  str topic | u32 partition | i16 acks | record batch (the rest of the frame)
Response: i64 base_offset | u32 record_count | u8 duplicate

The batch comes last so the broker can read the small prefix, then `recv_into` the batch
straight into the log's mapped region; `PREFIX_AFTER_TOPIC_BYTES` tells it how much prefix
follows the topic string.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from common.kaska.errors import InvalidRequestError, InvalidResponseError
from common.kaska.protocol.codec import BodyReader, BodyWriter
from common.kaska.protocol.frames import Api

ACKS_LEADER = 1
ACKS_ALL = -1
ACKS_VALID = (ACKS_LEADER, ACKS_ALL)
_AFTER_TOPIC = struct.Struct(">Ih")
PREFIX_AFTER_TOPIC_BYTES = _AFTER_TOPIC.size


@dataclass(frozen=True, slots=True)
class ProducePrefix:
    topic: str
    partition: int
    acks: int

    def encode(self) -> bytes:
        return (BodyWriter().string(self.topic).u32(self.partition).i16(self.acks).getvalue())


def _check_acks(acks: int) -> None:
    if acks not in ACKS_VALID:
        raise InvalidRequestError(f"acks {acks} is not 1 (leader) or -1 (all)")


def read_prefix(read_exact: Callable[[int], bytes]) -> ProducePrefix:
    """The prefix from a stream: `read_exact(n)` returns n bytes or raises."""
    (topic_bytes,) = struct.unpack(">H", read_exact(2))
    raw = read_exact(topic_bytes + PREFIX_AFTER_TOPIC_BYTES)
    try:
        topic = raw[:topic_bytes].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequestError("topic is not UTF-8") from exc
    partition, acks = _AFTER_TOPIC.unpack_from(raw, topic_bytes)
    _check_acks(acks)
    return ProducePrefix(topic, partition, acks)


@dataclass(frozen=True, slots=True)
class ProduceRequest:
    API: ClassVar[Api] = Api.PRODUCE
    topic: str
    partition: int
    acks: int
    batch: bytes

    def encode_parts(self) -> tuple[bytes, bytes]:
        """(prefix, batch): sent with one scatter-gather call, the batch is never copied."""
        return ProducePrefix(self.topic, self.partition, self.acks).encode(), self.batch

    def encode(self) -> bytes:
        prefix, batch = self.encode_parts()
        return prefix + batch

    @classmethod
    def decode(cls, buf) -> ProduceRequest:
        reader = BodyReader(buf)
        topic = reader.string("topic")
        partition = reader.u32("partition")
        acks = reader.i16("acks")
        _check_acks(acks)
        return cls(topic, partition, acks, bytes(reader.rest()))


@dataclass(frozen=True, slots=True)
class ProduceResponse:
    base_offset: int
    record_count: int
    duplicate: bool

    def encode(self) -> bytes:
        return (BodyWriter().i64(self.base_offset).u32(self.record_count)
                .flag(self.duplicate).getvalue())

    @classmethod
    def decode(cls, buf) -> ProduceResponse:
        reader = BodyReader(buf, InvalidResponseError)
        response = cls(reader.i64("base_offset"), reader.u32("record_count"),
                       reader.flag("duplicate"))
        reader.finish()
        return response
