"""The replication groups of one broker, and which group replicates each topic and partition
(replication/placement.py; docs/replication.md, "Leadership spread over the brokers").

`ReplicationGroups` is the broker's table of its groups: the group of a partition (and so who
leads it), the metadata group (topics, the controller, the broker list), the group a peer
request's signed stamp names, and every group's node (metrics). With one group every lookup
lands in group 0, as before groups existed. Partitions themselves are found through
partition_table.py; topics are created and deleted through topic_admin.py.

Thread-safety: the group table never changes after start (a group's replica manager is set
once, when the broker listens); the groups' own objects are thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from common.kaska.protocol.metadata import BrokerInfo
from services.broker.cluster.partition import PartitionRole
from services.broker.cluster.replica_manager import ReplicaManager
from services.broker.replication.committed_topics import CommittedTopics
from services.broker.replication.node import ReplicationNode
from services.broker.replication.placement import METADATA_GROUP, group_of, partitions_of
from services.broker.replication.topic_mirror import TopicMirror
from services.broker.storage.log import Log


@dataclass(slots=True)
class ReplicationGroup:
    number: int
    log: Log
    node: ReplicationNode
    topics: CommittedTopics
    replicas: ReplicaManager | None = None  # once the broker listens (its address is known)
    mirror: TopicMirror | None = None  # data groups only

    @property
    def manager(self) -> ReplicaManager:
        assert self.replicas is not None, "the broker is not listening yet"
        return self.replicas


class ReplicationGroups:
    def __init__(self, groups: list[ReplicationGroup]) -> None:
        assert groups and all(g.number == i for i, g in enumerate(groups))
        self._groups = tuple(groups)
        self.count = len(groups)

    @property
    def metadata(self) -> ReplicationGroup:
        return self._groups[METADATA_GROUP]

    def __getitem__(self, number: int) -> ReplicationGroup:
        """The group a peer request's stamp names (the peer gate checked its range)."""
        return self._groups[number]

    def __iter__(self) -> Iterator[ReplicationGroup]:
        return iter(self._groups)

    def of(self, topic: str, partition: int) -> ReplicationGroup:
        return self._groups[group_of(topic, partition, self.count)]

    def with_partitions_of(self, topic: str, partitions: int) -> list[ReplicationGroup]:
        """The data groups (not the metadata group) replicating a partition of the topic."""
        return [g for g in self._groups[1:]
                if partitions_of(topic, partitions, g.number, self.count)]

    def replication_nodes(self) -> list[tuple[int, ReplicationNode]]:
        """(group number, its node) of every group, for the metrics."""
        return [(group.number, group.node) for group in self._groups]

    # -- leadership --------------------------------------------------------------------------

    def role(self, topic: str, partition: int) -> PartitionRole:
        """Who leads the partition (its group's leader, named only while it holds its lease)."""
        return self.of(topic, partition).manager.role(topic, partition)

    def require_leader(self, topic: str, partition: int) -> PartitionRole:
        """The role of a partition this broker leads, with its lease; NotLeaderError otherwise
        (for the coordinator of committed offsets, which needs no partition's log)."""
        return self.of(topic, partition).manager.require_leader(topic, partition)

    def retention_safe_offset(self, topic: str, partition: int) -> int:
        """Retention stays below it: the partition's committed end in its group."""
        return self.of(topic, partition).manager.committed_end(topic, partition)

    def controller_role(self) -> PartitionRole:
        """Who leads the metadata group: where topics are created and deleted."""
        return self.metadata.manager.role("", 0)

    def brokers(self) -> tuple[BrokerInfo, ...]:
        return self.metadata.manager.brokers()

    def lease_refused(self) -> None:
        """Count one answer that named no leader for lack of a lease (replica_manager.py)."""
        self.metadata.manager.lease_refused()
