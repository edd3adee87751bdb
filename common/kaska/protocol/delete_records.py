"""DELETE_RECORDS (api 11): move partitions' log start offsets forward (Kafka's DeleteRecords,
KIP-107). Whole segments below the new start are deleted on every replica; a fetch below it is
OFFSET_OUT_OF_RANGE; LIST_OFFSETS answers it as the log start.

Version 0. Request: str topic | u32 n | n x (u32 partition | i64 offset)
  Moves whatever incarnation of `topic` is live.
Version 1. Request: str topic | i32 id_epoch | i64 id_index | u32 n | n x (u32 partition |
  i64 offset)
  Only the incarnation the id names (topic_id.py; as DELETE_TOPIC version 1): another one live
  is UNKNOWN_TOPIC_ID for the whole request and nothing moves.
Response (both): u32 n | n x (u32 partition | i16 error_code | i64 low_watermark)
  One answer per requested partition, in request order. `low_watermark`: the partition's log
  start after the request (the current one when the offset was at or below it); -1 with an
  error.

`offset` -1 means "the high watermark" (everything committed so far); any other negative
offset is refused (InvalidRequestError). Partitions are distinct and below PARTITIONS_MAX (at
most that many per request): a frame breaking either is refused whole. Per-partition errors:
OFFSET_OUT_OF_RANGE (above the high watermark), NOT_LEADER (only the partition's leader
answers), UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS (the move was not committed by a
majority in time; retriable), KAFKA_STORAGE_ERROR. Pure data classes; thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from common.kaska.errors import (
    InvalidRequestError,
    InvalidResponseError,
    UnsupportedVersionError,
)
from common.kaska.protocol.codec import BodyReader, BodyWriter
from common.kaska.protocol.frames import Api
from common.kaska.protocol.topic_id import TopicId, read_topic_id, write_topic_id

VERSIONS = frozenset({0, 1})
HIGH_WATERMARK = -1  # the offset that means "the high watermark"
NO_LOW_WATERMARK = -1  # an error answer's low watermark
PARTITIONS_MAX = 1024  # the storage bound on a topic's partitions
_PARTITION_REQUEST_BYTES = 4 + 8
_PARTITION_ANSWER_BYTES = 4 + 2 + 8


@dataclass(frozen=True, slots=True)
class PartitionDelete:
    partition: int
    offset: int  # HIGH_WATERMARK or >= 0


@dataclass(frozen=True, slots=True)
class PartitionDeleted:
    partition: int
    error_code: int  # 0: moved (or already there)
    low_watermark: int  # the log start now; NO_LOW_WATERMARK with an error


@dataclass(frozen=True, slots=True)
class DeleteRecordsRequest:
    API: ClassVar[Api] = Api.DELETE_RECORDS
    topic: str
    partitions: tuple[PartitionDelete, ...]
    topic_id: TopicId | None = None  # None: any incarnation (version 0)

    def __post_init__(self) -> None:
        check_partitions(self.partitions, InvalidRequestError)

    @property
    def version(self) -> int:
        return 0 if self.topic_id is None else 1

    def encode(self) -> bytes:
        writer = BodyWriter().string(self.topic)
        if self.topic_id is not None:
            write_topic_id(writer, self.topic_id)
        writer.u32(len(self.partitions))
        for item in self.partitions:
            writer.u32(item.partition).i64(item.offset)
        return writer.getvalue()

    @classmethod
    def decode(cls, buf, version: int = 0) -> DeleteRecordsRequest:
        if version not in VERSIONS:
            raise UnsupportedVersionError(f"DELETE_RECORDS has no version {version}")
        reader = BodyReader(buf)
        topic = reader.string("topic")
        topic_id = None
        if version == 1:
            topic_id = read_topic_id(reader, InvalidRequestError)
            if topic_id is None:
                raise InvalidRequestError("a version 1 DELETE_RECORDS names an incarnation")
        partitions = tuple(PartitionDelete(reader.u32("partition"), reader.i64("offset"))
                           for _ in range(reader.count(_PARTITION_REQUEST_BYTES,
                                                       "partitions")))
        reader.finish()
        return cls(topic, partitions, topic_id)

    @staticmethod
    def decode_response(buf) -> DeleteRecordsResponse:
        return DeleteRecordsResponse.decode(buf)


@dataclass(frozen=True, slots=True)
class DeleteRecordsResponse:
    partitions: tuple[PartitionDeleted, ...]

    def encode(self) -> bytes:
        writer = BodyWriter().u32(len(self.partitions))
        for item in self.partitions:
            writer.u32(item.partition).i16(item.error_code).i64(item.low_watermark)
        return writer.getvalue()

    @classmethod
    def decode(cls, buf) -> DeleteRecordsResponse:
        reader = BodyReader(buf, InvalidResponseError)
        partitions = tuple(
            PartitionDeleted(reader.u32("partition"), reader.i16("error_code"),
                             reader.i64("low_watermark"))
            for _ in range(reader.count(_PARTITION_ANSWER_BYTES, "partitions")))
        reader.finish()
        if len(partitions) > PARTITIONS_MAX:
            raise InvalidResponseError(f"{len(partitions)} partitions answered; at most "
                                       f"{PARTITIONS_MAX}")
        for item in partitions:
            if item.low_watermark < NO_LOW_WATERMARK:
                raise InvalidResponseError(f"low watermark {item.low_watermark} of partition "
                                           f"{item.partition} is out of range")
        return cls(partitions)


def check_partitions(partitions: tuple[PartitionDelete, ...], error) -> None:
    """At most PARTITIONS_MAX distinct partitions, each below it, offsets -1 or >= 0."""
    if len(partitions) > PARTITIONS_MAX:
        raise error(f"{len(partitions)} partitions; at most {PARTITIONS_MAX} per request")
    seen: set[int] = set()
    for item in partitions:
        if not 0 <= item.partition < PARTITIONS_MAX:
            raise error(f"partition {item.partition} outside 0..{PARTITIONS_MAX - 1}")
        if item.partition in seen:
            raise error(f"partition {item.partition} named twice")
        seen.add(item.partition)
        if item.offset < HIGH_WATERMARK:
            raise error(f"offset {item.offset} of partition {item.partition}: -1 (the high "
                        "watermark) or >= 0")
