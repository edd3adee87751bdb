"""The journal snapshot table, and SNAPSHOT_FETCH (broker to broker): a follower behind the
leader's compacted journal copies the partition bytes the snapshot covers (Raft §7's
InstallSnapshot, KIP-630's FetchSnapshot; docs/replication.md "Compaction").

Snapshot table (in a REPLICA_FETCH answer of outcome SNAPSHOT, and at the head of a compacted
journal file), the state the journal prefix below `end` leaves behind:

    i64 end | u32 n × (i32 epoch | i64 start)                         the epoch cache
            | u32 n × (str topic | i32 id_epoch | i64 id_index | u32 partitions)  live topics
            | u32 n × (str topic | u32 partition | i64 end_offset)    every partition's end
            | i64 metadata_end_seen                                   the mirror's watermark
            | u32 n × (str topic | u32 partition | i64 log_start)     DeleteRecords' starts

A live topic is named by its TopicId (the CREATE_TOPIC entry that made it); a partition end is
the largest end offset of the prefix's BATCH/SKIPPED entries of the topic's live incarnation
(internal topics such as `__offsets` have no CREATE entry: partition ends only).
`metadata_end_seen`: in a data group, the longest metadata group prefix the prefix's topic
mirror entries were decided on (services/broker/replication/snapshot.py); 0 elsewhere. A table
written before it existed (a journal file of format version 2) ends after the partition ends:
`read(reader, with_metadata_end=False)`, which takes 0. `log_starts`: per partition of a live
incarnation, the largest log start a DELETE_RECORDS entry of the prefix moved it to (only
partitions that had one); a table written before they existed (journal format 2 or 3) has
none: `with_log_starts=False`.

Request:  i32 follower | i32 epoch | str topic | i32 id_epoch | i64 id_index | u32 partition
          | i64 offset | i64 end_offset | u32 max_bytes
          (id_epoch = id_index = -1: a topic without a CREATE entry, an internal one)
Response: i32 epoch | i32 leader_id | u8 outcome | i64 log_start_offset | data (the rest)
          DATA:       whole batches from the one holding `offset`, never past `end_offset` nor
                      the leader's high watermark (sendfile from the segment files)
          GONE:       the leader holds no such incarnation or partition (deleted since)
          NOT_LEADER: the receiver does not lead `epoch`
`log_start_offset`: the first offset the leader holds bytes of (its first segment's base, at or
below a DeleteRecords log start, which the snapshot's `log_starts` carry); a follower ending
below it restarts there (retention, DeleteRecords).
Pure data classes; thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar

from common.kaska.errors import InvalidResponseError
from common.kaska.protocol.codec import BodyReader, BodyWriter
from common.kaska.protocol.frames import Api

NO_TOPIC_ID = -1  # id_epoch and id_index of a topic no CREATE_TOPIC made (internal topics)
_EPOCH_BYTES = 4 + 8
_TOPIC_BYTES_MIN = 2 + 4 + 8 + 4
_PARTITION_BYTES_MIN = 2 + 4 + 8


@dataclass(frozen=True, slots=True)
class SnapshotTopic:
    name: str
    id_epoch: int
    id_index: int
    partitions: int


@dataclass(frozen=True, slots=True)
class PartitionEnd:
    topic: str
    partition: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The state of the journal prefix below `end`; `Snapshot()` is the empty prefix."""

    end: int = 0
    epochs: tuple[tuple[int, int], ...] = ()  # (epoch, first index), ascending
    topics: tuple[SnapshotTopic, ...] = ()  # sorted by name
    partition_ends: tuple[PartitionEnd, ...] = ()  # sorted by (topic, partition)
    metadata_end_seen: int = 0  # a data group's topic mirror watermark (see the docstring)
    log_starts: tuple[PartitionEnd, ...] = ()  # DELETE_RECORDS' starts, as (topic, p, offset)

    @property
    def last_epoch(self) -> int:
        """The epoch of the entry at end - 1; 0 for the empty prefix."""
        return self.epochs[-1][0] if self.epochs else 0

    def write(self, writer: BodyWriter) -> BodyWriter:
        writer.i64(self.end).u32(len(self.epochs))
        for epoch, start in self.epochs:
            writer.i32(epoch).i64(start)
        writer.u32(len(self.topics))
        for topic in self.topics:
            writer.string(topic.name).i32(topic.id_epoch).i64(topic.id_index).u32(
                topic.partitions)
        writer.u32(len(self.partition_ends))
        for end in self.partition_ends:
            writer.string(end.topic).u32(end.partition).i64(end.end_offset)
        writer.i64(self.metadata_end_seen).u32(len(self.log_starts))
        for start in self.log_starts:
            writer.string(start.topic).u32(start.partition).i64(start.end_offset)
        return writer

    def encode(self) -> bytes:
        return self.write(BodyWriter()).getvalue()

    @classmethod
    def read(cls, reader: BodyReader, *, with_metadata_end: bool = True,
             with_log_starts: bool = True) -> Snapshot:
        """`with_metadata_end`: False for a table written before `metadata_end_seen` existed
        (it reads as 0); `with_log_starts`: False for one written before `log_starts`."""
        end = reader.i64("snapshot end")
        epochs = tuple((reader.i32("snapshot epoch"), reader.i64("snapshot epoch start"))
                       for _ in range(reader.count(_EPOCH_BYTES, "snapshot epochs")))
        topics = tuple(SnapshotTopic(reader.string("snapshot topic"), reader.i32("id_epoch"),
                                     reader.i64("id_index"), reader.u32("partitions"))
                       for _ in range(reader.count(_TOPIC_BYTES_MIN, "snapshot topics")))
        ends = tuple(PartitionEnd(reader.string("snapshot partition topic"),
                                  reader.u32("partition"), reader.i64("end_offset"))
                     for _ in range(reader.count(_PARTITION_BYTES_MIN, "snapshot partitions")))
        metadata_end_seen = reader.i64("metadata_end_seen") if with_metadata_end else 0
        starts: tuple[PartitionEnd, ...] = ()
        if with_metadata_end and with_log_starts:
            starts = tuple(
                PartitionEnd(reader.string("snapshot log start topic"), reader.u32("partition"),
                             reader.i64("log_start"))
                for _ in range(reader.count(_PARTITION_BYTES_MIN, "snapshot log starts")))
        return cls(end, epochs, topics, ends, metadata_end_seen, starts)

    @classmethod
    def decode(cls, buf, error=InvalidResponseError, *,
               with_metadata_end: bool = True, with_log_starts: bool = True) -> Snapshot:
        reader = BodyReader(buf, error)
        snapshot = cls.read(reader, with_metadata_end=with_metadata_end,
                            with_log_starts=with_log_starts)
        reader.finish()
        return snapshot


class SnapshotFetchOutcome(IntEnum):
    DATA = 0
    GONE = 1
    NOT_LEADER = 2


@dataclass(frozen=True, slots=True)
class SnapshotFetchRequest:
    API: ClassVar[Api] = Api.SNAPSHOT_FETCH
    follower: int
    epoch: int
    topic: str
    id_epoch: int  # NO_TOPIC_ID for an internal topic
    id_index: int
    partition: int
    offset: int  # the follower's log end: send from the batch holding it
    end_offset: int  # the snapshot's end of the partition: nothing at or past it
    max_bytes: int

    def encode(self) -> bytes:
        return (BodyWriter().i32(self.follower).i32(self.epoch).string(self.topic)
                .i32(self.id_epoch).i64(self.id_index).u32(self.partition).i64(self.offset)
                .i64(self.end_offset).u32(self.max_bytes).getvalue())

    @classmethod
    def decode(cls, buf) -> SnapshotFetchRequest:
        reader = BodyReader(buf)
        request = cls(reader.i32("follower"), reader.i32("epoch"), reader.string("topic"),
                      reader.i32("id_epoch"), reader.i64("id_index"), reader.u32("partition"),
                      reader.i64("offset"), reader.i64("end_offset"), reader.u32("max_bytes"))
        reader.finish()
        return request


@dataclass(frozen=True, slots=True)
class SnapshotFetchResponse:
    epoch: int
    leader_id: int
    outcome: SnapshotFetchOutcome
    log_start_offset: int = 0
    data: bytes | memoryview = b""

    def encode_prefix(self) -> bytes:
        return (BodyWriter().i32(self.epoch).i32(self.leader_id).u8(self.outcome)
                .i64(self.log_start_offset).getvalue())

    def encode(self) -> bytes:
        return self.encode_prefix() + bytes(self.data)

    @classmethod
    def decode(cls, buf) -> SnapshotFetchResponse:
        reader = BodyReader(buf, InvalidResponseError)
        epoch = reader.i32("epoch")
        leader_id = reader.i32("leader_id")
        raw = reader.u8("outcome")
        try:
            outcome = SnapshotFetchOutcome(raw)
        except ValueError as exc:
            raise InvalidResponseError(f"unknown snapshot fetch outcome {raw}") from exc
        start = reader.i64("log_start_offset")
        data = reader.rest()
        if data and outcome is not SnapshotFetchOutcome.DATA:
            raise InvalidResponseError(f"a {outcome.name} answer carries {len(data)} bytes")
        return cls(epoch, leader_id, outcome, start, data)
