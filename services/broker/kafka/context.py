"""What the Kafka handlers use: the broker's own context, plus what only Kafka needs -- every
broker's Kafka address on the listener the connection came in through (METADATA, FindCoordinator
and DescribeCluster name brokers by them: `advertised_brokers`), the cluster id, the random
source InitProducerId draws producer ids from, and the consumer groups this broker coordinates
(consumer_groups.py, thread-safe). Immutable; one per named listener (config.py), all sharing the
broker context, the random source and the consumer groups; shared by that listener's connection
threads.

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
    brokers: tuple[BrokerInfo, ...]  # every broker's address on `listener`, this broker's first
    cluster_id: str
    rng: random.Random
    consumer_groups: GroupCoordinator
    listener: str = "PLAINTEXT"  # the listener's name (config.py)

    def kafka_broker(self, node_id: int) -> BrokerInfo | None:
        """Broker `node_id`'s address on this listener; None for a broker without one."""
        return next((b for b in self.brokers if b.node_id == node_id), None)


def advertised_brokers(kctx: KafkaContext) -> tuple[BrokerInfo, ...]:
    """Every broker as a client of this connection's listener must reach it (Kafka's
    advertised.listeners of that name), this broker first."""
    return kctx.brokers
