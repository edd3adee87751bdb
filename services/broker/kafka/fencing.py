"""The client's current leader epoch (KIP-320): Fetch (v9+), ListOffsets (v4+) and
OffsetForLeaderEpoch (v2+) name the leader epoch their Metadata gave; a broker whose epoch of
the partition differs refuses, as Kafka's `Partition.getLocalLog` does, before it looks at
leadership: the client's epoch older than the broker's is FENCED_LEADER_EPOCH (its metadata is
stale: it refreshes), newer is UNKNOWN_LEADER_EPOCH (this broker has not learnt the election
yet: the client retries). -1 (or an older request version) checks nothing. The broker's epoch
is its replication group's Raft epoch, the one Metadata reports (metadata.py).

Pure apart from reading the replica manager's role; thread-safe.
"""

from __future__ import annotations

from services.broker.cluster.partition import Partition
from services.broker.handlers.common import find_partition
from services.broker.kafka.context import KafkaContext
from services.broker.kafka.errors import (
    FENCED_LEADER_EPOCH,
    UNKNOWN_LEADER_EPOCH,
    KafkaProtocolError,
)

NO_EPOCH = -1


class FencedLeaderEpochError(KafkaProtocolError):
    """The client's leader epoch is older than this broker's."""

    kafka_code = FENCED_LEADER_EPOCH


class UnknownLeaderEpochError(KafkaProtocolError):
    """The client's leader epoch is newer than this broker's."""

    kafka_code = UNKNOWN_LEADER_EPOCH


def check_current_epoch(what: str, broker_epoch: int, client_epoch: int) -> None:
    if client_epoch in (NO_EPOCH, broker_epoch):
        return
    if client_epoch < broker_epoch:
        raise FencedLeaderEpochError(
            f"{what}: leader epoch {client_epoch} is older than this broker's {broker_epoch}"
        )
    raise UnknownLeaderEpochError(
        f"{what}: leader epoch {client_epoch} is newer than this broker's {broker_epoch}"
    )


def led_partition_at(
    kctx: KafkaContext, topic: str, number: int, client_epoch: int = NO_EPOCH
) -> tuple[Partition, int]:
    """(partition, leader epoch) of a partition this broker leads at the client's epoch:
    the epoch errors above, then NotLeaderError, UnknownTopicOrPartitionError."""
    partition = find_partition(kctx.broker, topic, number)
    role = kctx.broker.replication.role(topic, number)
    check_current_epoch(f"{topic}/{number}", role.leader_epoch, client_epoch)
    return partition, partition.require_leader().leader_epoch
