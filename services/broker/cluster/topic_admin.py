"""Creating, deleting and listing topics across the broker's replication groups.

Topics are created and deleted in the metadata group (replica_manager.py journals them). A
create is answered once every data group with partitions of the topic has committed its opening
(replication/topic_mirror.py) on this broker's copy of that group, so a client's first produce
after the answer finds its partitions open on every leader; a delete once every such group has
committed its close here (docs/replication.md, "What a delete promises"). Past the ack timeout
both answer NotEnoughReplicasError (retriable): the change is made, some group lags.

Thread-safe: it keeps no state of its own beyond the (immutable) group table.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from common.kaska.errors import NotEnoughReplicasError
from services.broker.cluster.replication_groups import ReplicationGroup, ReplicationGroups
from services.broker.replication.committed_topics import LiveTopic
from services.broker.replication.journal import TopicId


class TopicAdmin:
    def __init__(self, groups: ReplicationGroups, ack_timeout_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._groups = groups
        self._ack_timeout_s = ack_timeout_s
        self._clock = clock

    def create_topic(self, name: str, partitions: int,
                     prepare: Callable[[], None] | None = None) -> TopicId:
        """Create in the metadata group; answer (its incarnation) once every data group
        holding a partition of it has committed its opening here (NotEnoughReplicasError,
        retriable, past the ack timeout: the topic exists, its retry answers
        TOPIC_ALREADY_EXISTS). `prepare()` runs first unless the topic exists (the topic's
        settings, topic_configs.py: an existing topic keeps its own)."""
        started = self._clock()
        if prepare is not None and name not in self.leader_committed_topics():
            prepare()
        topic_id = self._groups.metadata.manager.create_topic(name, partitions)
        for group in self._groups.with_partitions_of(name, partitions):
            left_s = self._ack_timeout_s - (self._clock() - started)
            if not _wait_opened(group, name, topic_id, left_s):
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
        committed before the delete. NotEnoughReplicasError (retriable) past the ack timeout:
        the topic is deleted, some group has not closed it yet."""
        started = self._clock()
        metadata = self._groups.metadata
        partitions = metadata.log.topics().get(name, 0)
        entry = metadata.manager.delete_topic(name, forget_offsets, topic_id)
        if entry is None or entry.topic_id is None:
            return  # gone already: a retry, answered as done
        for group in self._groups.with_partitions_of(name, partitions):
            left_s = self._ack_timeout_s - (self._clock() - started)
            if not _wait_closed(group, name, entry.topic_id, entry.index, left_s):
                raise NotEnoughReplicasError(
                    f"topic {name!r} is deleted, but replication group {group.number} has not "
                    f"closed its partitions within {self._ack_timeout_s:.0f} s (is its "
                    "leader elected?)")

    def committed_topics(self) -> dict[str, LiveTopic]:
        """The metadata group's committed topics on this broker (may lag; never uncommitted)."""
        return self._groups.metadata.manager.committed_topics()

    def leader_committed_topics(self) -> dict[str, LiveTopic]:
        """The same, current, from the metadata group's leader holding its lease (else
        NotLeaderError naming the leader)."""
        return self._groups.metadata.manager.leader_committed_topics()


def _wait_closed(group: ReplicationGroup, name: str, topic_id: TopicId, delete_index: int,
                 timeout_s: float) -> bool:
    """Until this broker's copy of `group` has committed entries decided on a metadata prefix
    holding the delete (its close among them, if the group had opened it) and does not hold the
    incarnation live."""
    node = group.node

    def closed() -> bool:
        view = group.topics.at(node.state.commit)
        live = view.topics.get(name)
        return view.metadata_end_seen > delete_index and (
            live is None or live.topic_id != topic_id)

    return closed() or (timeout_s > 0 and node.wait_changed(closed, timeout_s))


def _wait_opened(group: ReplicationGroup, name: str, topic_id: TopicId,
                 timeout_s: float) -> bool:
    node = group.node

    def opened() -> bool:
        live = group.topics.at(node.state.commit).topics.get(name)
        return live is not None and live.topic_id == topic_id

    return opened() or (timeout_s > 0 and node.wait_changed(opened, timeout_s))
