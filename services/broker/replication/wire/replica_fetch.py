"""REPLICA_FETCH (broker to broker): a follower pulls journal entries from the leader.

Request:  i32 follower | i32 epoch | i64 fetch_end | i32 last_fetched_epoch | u32 max_bytes
          | u32 max_wait_ms
Response: i32 epoch | i32 leader_id | i64 commit | u8 outcome, then
          ENTRIES:    u32 n | n × entry header | data (the rest of the frame)
          DIVERGING:  i32 diverging_epoch | i64 diverging_end
          NOT_LEADER: nothing
          SNAPSHOT:   the snapshot table (snapshot_fetch.py): fetch_end lies below the leader's
                      compacted prefix; the follower installs it and fetches on from its end
          TIMEOUT_NOW: nothing; the leader hands leadership to this follower, which holds its
                      whole journal, and stepped down: stand for election now (leadership transfer)
Entry header: i64 index | i32 epoch | u8 kind | str topic | u32 partition | i64 base_offset
              | u32 record_count | u32 partitions | u32 data_bytes

The data section is every BATCH entry's batch bytes, in entry order: the leader sends it with
`os.sendfile` straight from the segment files, after `encode_prefix()`. `data_bytes` says how
much of it belongs to each entry, so the follower can split it without parsing the batches.
See docs/replication.md for what the entries and outcomes mean.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar

from common.kaska.errors import InvalidResponseError
from common.kaska.protocol.codec import BodyReader, BodyWriter
from common.kaska.protocol.frames import Api
from services.broker.replication.wire.snapshot_fetch import Snapshot

# index, epoch, kind, empty topic, partition, base_offset, record_count, partitions, data_bytes
ENTRY_HEADER_BYTES_MIN = 8 + 4 + 1 + 2 + 4 + 8 + 4 + 4 + 4
NO_DIVERGENCE = -1


class EntryKind(IntEnum):
    NOOP = 0  # a new leader's first entry (Raft's no-op)
    CREATE_TOPIC = 1
    DELETE_TOPIC = 2
    BATCH = 3  # a record batch; its bytes follow in the data section
    SKIPPED = 4  # a batch whose bytes the leader no longer has (topic deleted, retention)
    DELETE_RECORDS = 5  # a partition's log start moves to base_offset (applied at commit)


class FetchOutcome(IntEnum):
    ENTRIES = 0  # the entries from fetch_end on (none when the follower is caught up)
    DIVERGING = 1  # the follower's journal diverges: truncate, then fetch again
    NOT_LEADER = 2  # the receiver does not lead `epoch`; epoch and leader_id say who might
    SNAPSHOT = 3  # fetch_end is below the leader's compacted prefix: install its snapshot
    TIMEOUT_NOW = 4  # the leader hands over to this follower and stepped down: stand now


@dataclass(frozen=True, slots=True)
class ReplicaFetchRequest:
    API: ClassVar[Api] = Api.REPLICA_FETCH
    follower: int
    epoch: int
    fetch_end: int  # the follower holds every entry below it
    last_fetched_epoch: int  # the epoch of the entry at fetch_end - 1
    max_bytes: int
    max_wait_ms: int

    def encode(self) -> bytes:
        return (BodyWriter().i32(self.follower).i32(self.epoch).i64(self.fetch_end)
                .i32(self.last_fetched_epoch).u32(self.max_bytes).u32(self.max_wait_ms)
                .getvalue())

    @classmethod
    def decode(cls, buf) -> ReplicaFetchRequest:
        reader = BodyReader(buf)
        request = cls(reader.i32("follower"), reader.i32("epoch"), reader.i64("fetch_end"),
                      reader.i32("last_fetched_epoch"), reader.u32("max_bytes"),
                      reader.u32("max_wait_ms"))
        reader.finish()
        return request


@dataclass(frozen=True, slots=True)
class EntryHeader:
    """One journal entry; fields a kind does not use stay at their defaults."""

    index: int
    epoch: int
    kind: EntryKind
    topic: str = ""
    partition: int = 0
    base_offset: int = 0
    record_count: int = 0
    partitions: int = 0  # CREATE_TOPIC
    data_bytes: int = 0  # BATCH: its bytes in the data section

    def write(self, writer: BodyWriter) -> BodyWriter:
        return (writer.i64(self.index).i32(self.epoch).u8(self.kind).string(self.topic)
                .u32(self.partition).i64(self.base_offset).u32(self.record_count)
                .u32(self.partitions).u32(self.data_bytes))

    @classmethod
    def read(cls, reader: BodyReader) -> EntryHeader:
        header = cls(reader.i64("index"), reader.i32("epoch"),
                     _enum(EntryKind, reader.u8("kind"), "entry kind"), reader.string("topic"),
                     reader.u32("partition"), reader.i64("base_offset"),
                     reader.u32("record_count"), reader.u32("partitions"),
                     reader.u32("data_bytes"))
        if header.data_bytes and header.kind is not EntryKind.BATCH:
            # Only batches own data; anything else would shift every later batch's bytes.
            raise InvalidResponseError(f"{header.kind.name} entry {header.index} announces "
                                       f"{header.data_bytes} data bytes")
        return header


@dataclass(frozen=True, slots=True)
class ReplicaFetchResponse:
    epoch: int
    leader_id: int  # NO_LEADER (metadata.py) when the receiver knows none
    commit: int
    outcome: FetchOutcome
    entries: tuple[EntryHeader, ...] = ()
    data: bytes | memoryview = b""
    diverging_epoch: int = NO_DIVERGENCE
    diverging_end: int = NO_DIVERGENCE
    snapshot: Snapshot | None = None  # SNAPSHOT

    def encode_prefix(self) -> bytes:
        """Everything before the data section, which the leader sends from its files."""
        writer = (BodyWriter().i32(self.epoch).i32(self.leader_id).i64(self.commit)
                  .u8(self.outcome))
        if self.outcome is FetchOutcome.ENTRIES:
            writer.u32(len(self.entries))
            for entry in self.entries:
                entry.write(writer)
        elif self.entries:
            raise ValueError(f"a {self.outcome.name} answer carries no entries")
        elif self.outcome is FetchOutcome.DIVERGING:
            writer.i32(self.diverging_epoch).i64(self.diverging_end)
        elif self.outcome is FetchOutcome.SNAPSHOT:
            if self.snapshot is None:
                raise ValueError("a SNAPSHOT answer carries its snapshot")
            self.snapshot.write(writer)
        return writer.getvalue()

    def encode(self) -> bytes:
        if _data_bytes(self.entries) != len(self.data):
            raise ValueError(f"entries announce {_data_bytes(self.entries)} data bytes, "
                             f"{len(self.data)} given")
        return self.encode_prefix() + bytes(self.data)

    @classmethod
    def decode(cls, buf) -> ReplicaFetchResponse:
        reader = BodyReader(buf, InvalidResponseError)
        epoch = reader.i32("epoch")
        leader_id = reader.i32("leader_id")
        commit = reader.i64("commit")
        outcome = _enum(FetchOutcome, reader.u8("outcome"), "fetch outcome")
        if outcome is FetchOutcome.ENTRIES:
            return cls._decode_entries(reader, epoch, leader_id, commit)
        if outcome is FetchOutcome.DIVERGING:
            response = cls(epoch, leader_id, commit, outcome,
                           diverging_epoch=reader.i32("diverging_epoch"),
                           diverging_end=reader.i64("diverging_end"))
        elif outcome is FetchOutcome.SNAPSHOT:
            response = cls(epoch, leader_id, commit, outcome, snapshot=Snapshot.read(reader))
        else:
            response = cls(epoch, leader_id, commit, outcome)
        reader.finish()
        return response

    @classmethod
    def _decode_entries(cls, reader: BodyReader, epoch: int, leader_id: int,
                        commit: int) -> ReplicaFetchResponse:
        entries = tuple(EntryHeader.read(reader)
                        for _ in range(reader.count(ENTRY_HEADER_BYTES_MIN, "entries")))
        data = reader.rest()
        if _data_bytes(entries) != len(data):
            raise InvalidResponseError(f"entries announce {_data_bytes(entries)} data bytes, "
                                       f"the answer holds {len(data)}")
        return cls(epoch, leader_id, commit, FetchOutcome.ENTRIES, entries, data)

    def batches(self) -> Iterator[tuple[EntryHeader, memoryview]]:
        """Each entry with its slice of the data section (empty unless it is a BATCH)."""
        if _data_bytes(self.entries) != len(self.data):
            raise ValueError("the entries and the data section disagree in length")
        view = memoryview(self.data)
        position = 0
        for entry in self.entries:
            yield entry, view[position:position + entry.data_bytes]
            position += entry.data_bytes


def _data_bytes(entries: tuple[EntryHeader, ...]) -> int:
    return sum(entry.data_bytes for entry in entries)


def _enum(enum: type[IntEnum], value: int, what: str):
    try:
        return enum(value)
    except ValueError as exc:
        raise InvalidResponseError(f"unknown {what} {value}") from exc
