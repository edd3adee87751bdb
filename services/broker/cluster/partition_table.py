"""Finding a partition: `PartitionTable.get(topic, p)` is the one lookup a request makes, and
answers a `Partition` (partition.py) bound to the log and replica manager of the replication
group that replicates it (replication_groups.py).

Topics are the metadata group's: a partition of a data group is found only when that group
holds the same incarnation of the topic as the metadata group here. A data group still closing
a deleted incarnation, or not yet opening a new one, answers UNKNOWN_TOPIC_OR_PARTITION
(retriable), so a request never reaches another incarnation's files.

Thread-safe: reads the (immutable) group table and the groups' thread-safe objects.
"""

from __future__ import annotations

from common.kaska.errors import UnknownTopicOrPartitionError
from services.broker.cluster.partition import Partition
from services.broker.cluster.replication_groups import ReplicationGroup, ReplicationGroups
from services.broker.replication.placement import METADATA_GROUP
from services.broker.storage.disk_space import DiskSpace
from services.broker.storage.partition import PartitionLog


class PartitionTable:
    def __init__(self, groups: ReplicationGroups) -> None:
        self._groups = groups
        self._metadata_log = groups.metadata.log

    @property
    def space(self) -> DiskSpace:
        """The data directory's disk space (every group's Log sits on the same file system)."""
        return self._metadata_log.space

    def topics(self) -> dict[str, int]:
        """Topic -> partition count in this broker's metadata-group Log, the internal topics
        every broker makes for itself (`__offsets`, never journaled) included."""
        return self._metadata_log.topics()

    def held(self, name: str) -> list[int]:
        """The partitions of `name` this broker holds files of."""
        count = self._metadata_log.topics().get(name, 0)
        return [p for p in range(count) if p in self._groups.of(name, p).log.held(name)]

    def get(self, topic: str, partition: int) -> Partition:
        """The partition, UnknownTopicOrPartitionError when this broker has no such partition
        of the topic's current incarnation."""
        group = self._group_holding(topic, partition)
        return group.manager.partition(topic, partition)

    def partition(self, topic: str, partition: int) -> PartitionLog:
        """The partition's log alone, checked as `get`: with `topics()` and `held()` this
        table reads as storage's Log does, every group's at once (retention)."""
        return self._group_holding(topic, partition).log.partition(topic, partition)

    def _group_holding(self, topic: str, partition: int) -> ReplicationGroup:
        group = self._groups.of(topic, partition)
        if group.number != METADATA_GROUP:
            metadata_id = self._groups.metadata.node.journal.incarnation(topic)
            if metadata_id is None or group.node.journal.incarnation(topic) != metadata_id \
                    or topic not in self._metadata_log.topics():
                raise UnknownTopicOrPartitionError(
                    f"{topic}/{partition}: replication group {group.number} does not hold this "
                    "incarnation of the topic (being opened or closed); retry")
        return group
