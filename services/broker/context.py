"""Everything a request handler may use, passed explicitly (no globals)."""

from __future__ import annotations

from dataclasses import dataclass

from services.broker.cluster.committed_offsets import CommittedOffsets
from services.broker.cluster.partition_table import PartitionTable
from services.broker.cluster.replication_groups import ReplicationGroups
from services.broker.cluster.topic_admin import TopicAdmin
from services.broker.cluster.topic_configs import TopicConfigs
from services.broker.config import BrokerConfig
from services.broker.metrics import BrokerCounters
from services.broker.network.notifier import DataNotifier
from services.broker.network.peer_gate import PeerGate


@dataclass(frozen=True, slots=True)
class BrokerContext:
    config: BrokerConfig
    partitions: PartitionTable  # `get(topic, p)`: the one lookup of a partition
    replication: ReplicationGroups  # who leads what; the group a peer request names
    topics: TopicAdmin  # create, delete, list
    offsets: CommittedOffsets
    notifier: DataNotifier
    metrics: BrokerCounters
    peer_gate: PeerGate
    topic_configs: TopicConfigs  # a topic's own retention and segment size

    @classmethod
    def over(cls, groups: ReplicationGroups, *, config: BrokerConfig, offsets: CommittedOffsets,
             notifier: DataNotifier, metrics: BrokerCounters, peer_gate: PeerGate,
             topic_configs: TopicConfigs | None = None) -> BrokerContext:
        """The context over the broker's replication groups (their managers set);
        `topic_configs` defaults to one over `offsets` attached to no Log (it knows no
        settings)."""
        return cls(config=config, partitions=PartitionTable(groups), replication=groups,
                   topics=TopicAdmin(groups, config.ack_timeout_s), offsets=offsets,
                   notifier=notifier, metrics=metrics, peer_gate=peer_gate,
                   topic_configs=topic_configs or TopicConfigs(offsets, config.storage))
