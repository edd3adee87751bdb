"""The replication groups of one broker, and the routing of every topic and partition to the
group that replicates it (replication/placement.py; docs/replication.md, "Leadership spread
over the brokers").

Request handlers see one Log and one replica manager, as when a broker ran one group:
- `GroupedLog` (the handlers' `ctx.log`): the topics are the metadata group's; a partition is
  looked up in its group's Log, and only when that group holds the same incarnation of the
  topic as the metadata group here (a data group still closing a deleted incarnation, or not
  yet opening a new one, answers UNKNOWN_TOPIC_OR_PARTITION, retriable);
- `GroupedReplicas` (the handlers' `ctx.replicas`): who leads a partition, its high watermark
  and its appends are its group's; topics are created and deleted in the metadata group; a
  create is answered once every data group with partitions of the topic has committed its
  opening (topic_mirror.py) on this broker's copy of that group, so a client's first produce
  after the answer finds its partitions open on every leader; peer requests go to the group
  their signed stamp names.

With one group both are thin: every call lands in group 0, as before groups existed.

Thread-safety: the group table never changes after start; the groups' own objects are
thread-safe.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from common.kaska.errors import NotEnoughReplicasError, UnknownTopicOrPartitionError
from common.kaska.protocol.metadata import BrokerInfo
from services.broker.offsets import OFFSETS_PARTITION
from services.broker.replica_manager import PartitionRole, ReplicaManager
from services.broker.replication.committed_topics import CommittedTopics, LiveTopic
from services.broker.replication.journal import TopicId
from services.broker.replication.node import ReplicationNode
from services.broker.replication.placement import METADATA_GROUP, group_of, partitions_of
from services.broker.replication.topic_mirror import TopicMirror
from services.broker.storage.log import Log
from services.broker.storage.partition import AppendResult, PartitionLog


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


class BrokerGroups:
    def __init__(self, groups: list[ReplicationGroup]) -> None:
        assert groups and all(g.number == i for i, g in enumerate(groups))
        self._groups = tuple(groups)
        self.count = len(groups)

    @property
    def metadata(self) -> ReplicationGroup:
        return self._groups[METADATA_GROUP]

    def __getitem__(self, number: int) -> ReplicationGroup:
        return self._groups[number]

    def __iter__(self) -> Iterator[ReplicationGroup]:
        return iter(self._groups)

    def of(self, topic: str, partition: int) -> ReplicationGroup:
        return self._groups[group_of(topic, partition, self.count)]

    def with_partitions_of(self, topic: str, partitions: int) -> list[ReplicationGroup]:
        """The data groups (not the metadata group) replicating a partition of the topic."""
        return [g for g in self._groups[1:]
                if partitions_of(topic, partitions, g.number, self.count)]


class GroupedLog:
    """What handlers read as the broker's Log (see the module docstring)."""

    def __init__(self, groups: BrokerGroups) -> None:
        self._groups = groups
        self._metadata_log = groups.metadata.log
        # Statuses and disk metrics: every group's Log sits on the same file system.
        self.spaces = [g.log.space for g in groups]

    @property
    def space(self):
        return self._metadata_log.space

    def topics(self) -> dict[str, int]:
        return self._metadata_log.topics()

    def partition(self, name: str, partition: int) -> PartitionLog:
        group = self._groups.of(name, partition)
        if group.number != METADATA_GROUP:
            metadata_id = self._groups.metadata.node.journal.incarnation(name)
            if metadata_id is None or group.node.journal.incarnation(name) != metadata_id \
                    or name not in self._metadata_log.topics():
                raise UnknownTopicOrPartitionError(
                    f"{name}/{partition}: replication group {group.number} does not hold this "
                    "incarnation of the topic (being opened or closed); retry")
        return group.log.partition(name, partition)

    def held(self, name: str) -> list[int]:
        count = self._metadata_log.topics().get(name, 0)
        return [p for p in range(count) if p in self._groups.of(name, p).log.held(name)]


class GroupedReplicas:
    """What handlers use as the broker's replica manager (see the module docstring)."""

    def __init__(self, groups: BrokerGroups, ack_timeout_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._groups = groups
        self._metadata = groups.metadata.manager
        self._ack_timeout_s = ack_timeout_s
        self._clock = clock

    @property
    def groups(self) -> BrokerGroups:
        return self._groups

    def group(self, number: int) -> ReplicationGroup:
        """The group a peer request's stamp names (the peer gate checked its range)."""
        return self._groups[number]

    def replication_nodes(self) -> list[tuple[int, ReplicationNode]]:
        """(group number, its node) of every group, for the metrics."""
        return [(group.number, group.node) for group in self._groups]

    # -- roles -------------------------------------------------------------------------------

    def brokers(self) -> tuple[BrokerInfo, ...]:
        return self._metadata.brokers()

    def role(self, topic: str, partition: int, *, lease: bool = True) -> PartitionRole:
        return self._groups.of(topic, partition).manager.role(topic, partition, lease=lease)

    def require_leader(self, topic: str, partition: int, *, lease: bool = True
                       ) -> PartitionRole:
        return self._groups.of(topic, partition).manager.require_leader(topic, partition,
                                                                        lease=lease)

    def controller_role(self) -> PartitionRole:
        """Who leads the metadata group: where topics are created and deleted."""
        return self._metadata.role("", 0)

    def lease_refused(self) -> None:
        self._metadata.lease_refused()

    def high_watermark(self, topic: str, partition: int, partition_log: PartitionLog) -> int:
        return self._groups.of(topic, partition).manager.high_watermark(topic, partition,
                                                                        partition_log)

    def retention_safe_offset(self, topic: str, partition: int) -> int:
        return self._groups.of(topic, partition).manager.retention_safe_offset(topic,
                                                                               partition)

    # -- appends -----------------------------------------------------------------------------

    def append_from(self, topic: str, partition: int, partition_log: PartitionLog,
                    total_bytes: int, fill: Callable[[memoryview], None], acks: int
                    ) -> AppendResult:
        return self._groups.of(topic, partition).manager.append_from(
            topic, partition, partition_log, total_bytes, fill, acks)

    def append_deferred(self, topic: str, partition: int, partition_log: PartitionLog,
                        total_bytes: int, fill: Callable[[memoryview], None], acks: int
                        ) -> tuple[AppendResult, Callable[[], None]]:
        return self._groups.of(topic, partition).manager.append_deferred(
            topic, partition, partition_log, total_bytes, fill, acks)

    def delete_records_deferred(self, topic: str, partition: int, partition_log: PartitionLog,
                                offset: int) -> Callable[[], int]:
        return self._groups.of(topic, partition).manager.delete_records_deferred(
            topic, partition, partition_log, offset)

    def append_offsets(self, batch: bytes) -> None:
        assert self._groups.of("__offsets", OFFSETS_PARTITION) is self._groups.metadata
        self._metadata.append_offsets(batch)

    # -- topics ------------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int) -> TopicId:
        """Create in the metadata group; answer (its incarnation) once every data group
        holding a partition of it has committed its opening here (NotEnoughReplicasError,
        retriable, past the ack timeout: the topic exists, its retry answers
        TOPIC_ALREADY_EXISTS)."""
        started = self._clock()
        topic_id = self._metadata.create_topic(name, partitions)
        for group in self._groups.with_partitions_of(name, partitions):
            left_s = self._ack_timeout_s - (self._clock() - started)
            if not self._wait_opened(group, name, topic_id, left_s):
                raise NotEnoughReplicasError(
                    f"topic {name!r} is created, but replication group {group.number} has not "
                    f"opened its partitions within {self._ack_timeout_s:.0f} s (is its "
                    "leader elected?)")
        return topic_id

    def delete_topic(self, name: str, forget_offsets: Callable[[str], None],
                     topic_id: TopicId | None = None) -> None:
        """Delete in the metadata group (only incarnation `topic_id` when given); answer once
        every data group holding a partition of it has committed its close here, so no
        produce to the deleted incarnation is acknowledged after the answer unless it was
        committed before the delete (docs/replication.md, "What a delete promises").
        NotEnoughReplicasError (retriable) past the ack timeout: the topic is deleted, some
        group has not closed it yet."""
        started = self._clock()
        partitions = self._groups.metadata.log.topics().get(name, 0)
        entry = self._metadata.delete_topic(name, forget_offsets, topic_id)
        if entry is None or entry.topic_id is None:
            return  # gone already: a retry, answered as done
        for group in self._groups.with_partitions_of(name, partitions):
            left_s = self._ack_timeout_s - (self._clock() - started)
            if not self._wait_closed(group, name, entry.topic_id, entry.index, left_s):
                raise NotEnoughReplicasError(
                    f"topic {name!r} is deleted, but replication group {group.number} has not "
                    f"closed its partitions within {self._ack_timeout_s:.0f} s (is its "
                    "leader elected?)")

    def committed_topics(self) -> dict[str, LiveTopic]:
        """The metadata group's committed topics on this broker (may lag; never uncommitted)."""
        return self._metadata.committed_topics()

    def leader_committed_topics(self) -> dict[str, LiveTopic]:
        """The same, current, from the metadata group's leader holding its lease (else
        NotLeaderError naming the leader)."""
        return self._metadata.leader_committed_topics()

    @staticmethod
    def _wait_closed(group: ReplicationGroup, name: str, topic_id: TopicId, delete_index: int,
                     timeout_s: float) -> bool:
        """Until this broker's copy of `group` has committed entries decided on a metadata
        prefix holding the delete (its close among them, if the group had opened it) and does
        not hold the incarnation live."""
        node = group.node

        def closed() -> bool:
            view = group.topics.at(node.state.commit)
            live = view.topics.get(name)
            return view.metadata_end_seen > delete_index and (
                live is None or live.topic_id != topic_id)

        return closed() or (timeout_s > 0 and node.wait_changed(closed, timeout_s))

    @staticmethod
    def _wait_opened(group: ReplicationGroup, name: str, topic_id: TopicId,
                     timeout_s: float) -> bool:
        node = group.node

        def opened() -> bool:
            live = group.topics.at(node.state.commit).topics.get(name)
            return live is not None and live.topic_id == topic_id

        return opened() or (timeout_s > 0 and node.wait_changed(opened, timeout_s))
