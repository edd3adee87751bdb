"""METADATA: the brokers and who leads each partition.

Request:  u32 n | n × str topic                      (n = 0: every topic)
Response: u32 n | n × (i32 node_id | str host | u16 port)
          u32 m | m × (str topic | u32 p | p × (u32 partition | i32 leader_id | i32 epoch))
          | i32 controller_id | i32 controller_epoch
A requested topic the broker does not have is left out of the answer. leader_id -1: none.
Each partition's leader and epoch are those of its replication group (partitions of one topic
may have different leaders); the controller is the metadata group's leader, where topics are
created and deleted (Kafka's controller), with that group's epoch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from common.kaska.errors import InvalidResponseError
from common.kaska.protocol.codec import BodyReader, BodyWriter
from common.kaska.protocol.frames import Api

NO_LEADER = -1
_TOPIC_BYTES_MIN = 2
_BROKER_BYTES_MIN = 4 + 2 + 2
_TOPIC_ENTRY_BYTES_MIN = 2 + 4
_PARTITION_BYTES = 4 + 4 + 4


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class MetadataRequest:
    API: ClassVar[Api] = Api.METADATA
    topics: tuple[str, ...] = ()

    def encode(self) -> bytes:
        writer = BodyWriter().u32(len(self.topics))
        for topic in self.topics:
            writer.string(topic)
        return writer.getvalue()

    @classmethod
    def decode(cls, buf) -> MetadataRequest:
        reader = BodyReader(buf)
        topics = tuple(reader.string("topic")
                       for _ in range(reader.count(_TOPIC_BYTES_MIN, "topics")))
        reader.finish()
        return cls(topics)


@dataclass(frozen=True, slots=True)
class MetadataResponse:
    brokers: tuple[BrokerInfo, ...]
    topics: dict[str, tuple[PartitionInfo, ...]]
    controller_id: int = NO_LEADER
    controller_epoch: int = 0

    def encode(self) -> bytes:
        writer = BodyWriter().u32(len(self.brokers))
        for broker in self.brokers:
            writer.i32(broker.node_id).string(broker.host).u16(broker.port)
        writer.u32(len(self.topics))
        for name, partitions in sorted(self.topics.items()):
            writer.string(name).u32(len(partitions))
            for info in partitions:
                writer.u32(info.partition).i32(info.leader_id).i32(info.leader_epoch)
        writer.i32(self.controller_id).i32(self.controller_epoch)
        return writer.getvalue()

    @classmethod
    def decode(cls, buf) -> MetadataResponse:
        reader = BodyReader(buf, InvalidResponseError)
        brokers = tuple(
            BrokerInfo(reader.i32("node_id"), reader.string("host"), reader.u16("port"))
            for _ in range(reader.count(_BROKER_BYTES_MIN, "brokers")))
        topics = {}
        for _ in range(reader.count(_TOPIC_ENTRY_BYTES_MIN, "topics")):
            name = reader.string("topic")
            topics[name] = tuple(
                PartitionInfo(reader.u32("partition"), reader.i32("leader_id"),
                              reader.i32("leader_epoch"))
                for _ in range(reader.count(_PARTITION_BYTES, "partitions")))
        controller_id, controller_epoch = reader.i32("controller_id"), reader.i32(
            "controller_epoch")
        reader.finish()
        return cls(brokers, topics, controller_id, controller_epoch)

    def broker(self, node_id: int) -> BrokerInfo | None:
        return next((b for b in self.brokers if b.node_id == node_id), None)
