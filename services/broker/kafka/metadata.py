"""Metadata (api key 3): the brokers' Kafka addresses and who leads each partition.

Leadership is the replica manager's (replica_manager.py): a partition's leader is named only when
it holds its lease and is a broker with a known Kafka address; otherwise the partition answers
LEADER_NOT_AVAILABLE, which clients retry. A partition's leader is its replication group's
(partitions of one topic may have different leaders). Every broker holds every partition, so
replicas and ISR list every broker (the ISR is approximate: Kaska's commit rule is a majority,
not an ISR). The controller is the metadata group's leader (where CreateTopics/DeleteTopics
go). Topics are never
created by a Metadata request; internal topics (`__offsets`) are not shown.
"""

from __future__ import annotations

from kafka.protocol.metadata import MetadataResponse

from common.kaska.protocol.metadata import NO_LEADER
from common.kaska.topic_name import is_internal
from services.broker.kafka.context import KafkaContext
from services.broker.kafka.errors import LEADER_NOT_AVAILABLE, NONE, UNKNOWN_TOPIC_OR_PARTITION

Topic = MetadataResponse.MetadataResponseTopic
Partition = Topic.MetadataResponsePartition
Broker = MetadataResponse.MetadataResponseBroker


def handle(kctx: KafkaContext, request) -> MetadataResponse:
    existing = kctx.broker.log.topics()
    if request.topics is None or (request.version == 0 and not request.topics):
        wanted = [name for name in existing if not is_internal(name)]
    else:
        wanted = [topic.name for topic in request.topics]
    topics = [_topic(kctx, name, existing.get(name)) for name in wanted]
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=[Broker(node_id=b.node_id, host=b.host, port=b.port, rack=None)
                 for b in kctx.brokers],
        cluster_id=kctx.cluster_id, controller_id=controller_id(kctx), topics=topics)


def leader_for(kctx: KafkaContext, topic: str, partition: int) -> tuple[int, int]:
    """(leader node id or -1, leader epoch) as Kafka clients may use them."""
    role = kctx.broker.replicas.role(topic, partition)
    if role.leader_id == NO_LEADER or kctx.kafka_broker(role.leader_id) is None:
        return NO_LEADER, role.leader_epoch
    return role.leader_id, role.leader_epoch


def controller_id(kctx: KafkaContext) -> int:
    """The metadata group's leader (where topics are created and deleted), if it has a Kafka
    address."""
    role = kctx.broker.replicas.controller_role()
    if role.leader_id == NO_LEADER or kctx.kafka_broker(role.leader_id) is None:
        return NO_LEADER
    return role.leader_id


def _topic(kctx: KafkaContext, name: str, partitions: int | None):
    if partitions is None or is_internal(name):
        return Topic(error_code=UNKNOWN_TOPIC_OR_PARTITION, name=name, is_internal=False,
                     partitions=[])
    replicas = [b.node_id for b in kctx.brokers]
    found = []
    for index in range(partitions):
        leader, epoch = leader_for(kctx, name, index)
        found.append(Partition(
            error_code=NONE if leader != NO_LEADER else LEADER_NOT_AVAILABLE,
            partition_index=index, leader_id=leader, leader_epoch=epoch,
            replica_nodes=replicas, isr_nodes=replicas, offline_replicas=[]))
    return Topic(error_code=NONE, name=name, is_internal=False, partitions=found)
