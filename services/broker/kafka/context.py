"""What the Kafka handlers use: the broker's own context, plus what only Kafka needs -- every
broker's Kafka address (METADATA names leaders by them), the cluster id, and the random source
InitProducerId draws producer ids from, and the consumer groups this broker coordinates
(consumer_groups.py, thread-safe). Immutable; shared by every Kafka connection thread.

`REQUEST_PEER`: the "host:port" of the client whose request the current thread handles (set by
requests.py around each handler), for the few answers that name the client (DescribeGroups'
client host)."""

from __future__ import annotations

import contextvars
import random
from dataclasses import dataclass

from common.kaska.protocol.metadata import BrokerInfo
from services.broker.context import BrokerContext
from services.broker.kafka.consumer_groups import GroupCoordinator

REQUEST_PEER: contextvars.ContextVar[str] = contextvars.ContextVar("kafka_request_peer",
                                                                   default="")


@dataclass(frozen=True, slots=True)
class KafkaContext:
    broker: BrokerContext
    node_id: int
    brokers: tuple[BrokerInfo, ...]  # Kafka listener addresses, this broker's first
    cluster_id: str
    rng: random.Random
    consumer_groups: GroupCoordinator

    def kafka_broker(self, node_id: int) -> BrokerInfo | None:
        return next((b for b in self.brokers if b.node_id == node_id), None)
