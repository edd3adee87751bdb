"""Metadata (api key 3): the brokers' Kafka addresses and who leads each partition.

The addresses are those of the listener the request came in through (context.py's
`advertised_brokers`): a client inside a container network is told the brokers' names there, one
on the host their published addresses.

Leadership is the replica manager's (cluster/replica_manager.py): a partition's leader is named
only when it holds its lease and is a broker with a known Kafka address; otherwise the partition
answers LEADER_NOT_AVAILABLE, which clients retry. A partition's leader is its replication group's
(partitions of one topic may have different leaders). A partition's replicas are its group's
voters (every broker). Its ISR is what the group's leader knows (replication/in_sync.py: the
voters that caught up to its journal end within the last few seconds): a broker that leads the
group answers it; any other broker cannot know it and names the leader alone (always in sync),
or nobody when it knows no leader -- ask the leader for the whole set. Commits need a majority,
not the ISR: the ISR is for operators and tools. The controller is the metadata group's leader
(where CreateTopics/DeleteTopics go). Topics are never created by a Metadata request; internal
topics (`__offsets`) are not shown.

The topics are this broker's metadata cache, as a Kafka broker's: the metadata group's committed
topics here (handlers/metadata.py). Any broker answers; it may lag the controller by a fetch
round, and never lists a topic whose create is not committed.
"""

from __future__ import annotations

from kafka.protocol.admin import DescribeClusterResponse
from kafka.protocol.metadata import MetadataResponse

from common.kaska.protocol.metadata import NO_LEADER
from common.kaska.topic_name import is_internal
from services.broker.kafka.context import KafkaContext, advertised_brokers
from services.broker.kafka.errors import (
    LEADER_NOT_AVAILABLE,
    NONE,
    UNKNOWN_TOPIC_OR_PARTITION,
    UNSUPPORTED_ENDPOINT_TYPE,
)
from services.broker.replication.in_sync import in_sync_replicas

BROKERS_ENDPOINT = 1  # DescribeCluster's endpoint type 1; 2 (controllers) is a controller's

Topic = MetadataResponse.MetadataResponseTopic
Partition = Topic.MetadataResponsePartition
Broker = MetadataResponse.MetadataResponseBroker


def handle(kctx: KafkaContext, request) -> MetadataResponse:
    existing = {name: live.partitions
                for name, live in kctx.broker.topics.committed_topics().items()}
    if request.topics is None or (request.version == 0 and not request.topics):
        wanted = [name for name in existing if not is_internal(name)]
    else:
        wanted = [topic.name for topic in request.topics]
    topics = [_topic(kctx, name, existing.get(name)) for name in wanted]
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=[Broker(node_id=b.node_id, host=b.host, port=b.port, rack=None)
                 for b in advertised_brokers(kctx)],
        cluster_id=kctx.cluster_id, controller_id=controller_id(kctx), topics=topics)


def handle_describe_cluster(kctx: KafkaContext, request) -> DescribeClusterResponse:
    """DescribeCluster (api key 60, v0..2): Metadata's brokers, cluster id and controller
    (AdminClient.describe_cluster). Endpoint type 2 (the controllers) is answered by Kafka's
    controllers only; a broker refuses it with UNSUPPORTED_ENDPOINT_TYPE, as here. No broker is
    ever fenced."""
    Described = DescribeClusterResponse.DescribeClusterBroker
    answer = DescribeClusterResponse(
        throttle_time_ms=0, error_code=NONE, error_message=None,
        endpoint_type=BROKERS_ENDPOINT, cluster_id=kctx.cluster_id,
        controller_id=controller_id(kctx), brokers=[])
    if request.version >= 1 and request.endpoint_type != BROKERS_ENDPOINT:
        answer.endpoint_type = request.endpoint_type
        answer.error_code = UNSUPPORTED_ENDPOINT_TYPE
        answer.error_message = "brokers answer endpoint type 1 (brokers) only"
        return answer
    answer.brokers = [Described(broker_id=b.node_id, host=b.host, port=b.port, rack=None,
                                is_fenced=False) for b in advertised_brokers(kctx)]
    return answer


def leader_for(kctx: KafkaContext, topic: str, partition: int) -> tuple[int, int]:
    """(leader node id or -1, leader epoch) as Kafka clients may use them. Without a leader
    (none elected, or one without its lease yet), the epoch before the broker's: Raft's epoch
    rises with a candidacy, before anyone leads it, while a Kafka client takes a rise of the
    epoch for a new leader and validates its position then (KIP-320). librdkafka given the new
    epoch with no leader skips that validation for good, and the leader's arrival at the same
    epoch is no news; one epoch lower, the leader's epoch is news whenever it comes."""
    role = kctx.broker.replication.role(topic, partition)
    if role.leader_id == NO_LEADER or kctx.kafka_broker(role.leader_id) is None:
        return NO_LEADER, max(role.leader_epoch - 1, 0)
    return role.leader_id, role.leader_epoch


def controller_id(kctx: KafkaContext) -> int:
    """The metadata group's leader (where topics are created and deleted), if it has a Kafka
    address."""
    role = kctx.broker.replication.controller_role()
    if role.leader_id == NO_LEADER or kctx.kafka_broker(role.leader_id) is None:
        return NO_LEADER
    return role.leader_id


def _topic(kctx: KafkaContext, name: str, partitions: int | None):
    if partitions is None or is_internal(name):
        return Topic(error_code=UNKNOWN_TOPIC_OR_PARTITION, name=name, is_internal=False,
                     partitions=[])
    found = []
    for index in range(partitions):
        leader, epoch = leader_for(kctx, name, index)
        replicas, isr = replicas_and_isr(kctx, name, index, leader)
        found.append(Partition(
            error_code=NONE if leader != NO_LEADER else LEADER_NOT_AVAILABLE,
            partition_index=index, leader_id=leader, leader_epoch=epoch,
            replica_nodes=replicas, isr_nodes=isr, offline_replicas=[]))
    return Topic(error_code=NONE, name=name, is_internal=False, partitions=found)


def replicas_and_isr(kctx: KafkaContext, topic: str, partition: int,
                     leader: int) -> tuple[list[int], list[int]]:
    """(the partition's group's voters, its in-sync replicas as this broker can know them):
    the group's ISR where this broker leads it, else `leader` alone (none for NO_LEADER)."""
    node = kctx.broker.replication.of(topic, partition).node
    in_sync = in_sync_replicas(node.raft_config, node.state, node.clock())
    if in_sync is None:
        in_sync = () if leader == NO_LEADER else (leader,)
    return sorted(node.raft_config.voters), sorted(in_sync)
