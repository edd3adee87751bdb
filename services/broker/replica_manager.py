"""The seam between request handling and the leader/follower role of each partition.

Handlers never decide leadership or visibility themselves: they ask the replica manager who
leads a partition (NOT_LEADER answers carry its address), which offset is the high watermark
(the end of what consumers may see) and when a produce is acknowledged. Replication replaces
`SingleNodeReplicaManager` with a manager that tracks followers; the handlers stay as they are.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.kaska.errors import NotLeaderError
from common.kaska.protocol.metadata import BrokerInfo


@dataclass(frozen=True, slots=True)
class PartitionRole:
    is_leader: bool
    leader_id: int
    leader_epoch: int
    leader_address: str  # "host:port", "" when unknown


class SingleNodeReplicaManager:
    """This broker leads every partition at epoch 0; the high watermark is the log end.

    Thread-safe: it holds no mutable state.
    """

    LEADER_EPOCH = 0

    def __init__(self, node_id: int, advertised: tuple[str, int]) -> None:
        self._self = BrokerInfo(node_id, advertised[0], advertised[1])

    def brokers(self) -> tuple[BrokerInfo, ...]:
        return (self._self,)

    def role(self, topic: str, partition: int) -> PartitionRole:
        return PartitionRole(True, self._self.node_id, self.LEADER_EPOCH, self._self.address)

    def require_leader(self, topic: str, partition: int) -> PartitionRole:
        role = self.role(topic, partition)
        if not role.is_leader:
            error = NotLeaderError(f"{topic}/{partition} is led by node {role.leader_id}")
            error.leader = role.leader_address
            raise error
        return role

    def high_watermark(self, topic: str, partition: int, log) -> int:
        return log.log_end_offset

    def await_acks(self, topic: str, partition: int, end_offset: int, acks: int,
                   timeout_s: float) -> None:
        """Return once `acks` replicas hold the log up to end_offset (alone: at once)."""
