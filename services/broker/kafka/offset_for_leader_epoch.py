"""OffsetForLeaderEpoch (api key 23, v2..4; KIP-101, KIP-320): where a leader epoch ends in a
partition's log. A consumer asks after a leader change, naming the epoch of the last batch it
read: an end offset below its position means the log it read from was truncated (the client
then seeks back, or resets).

Answered from the partition's leader epoch cache (../storage/leader_epochs.py, built from
the epochs stamped on its batches, which are the replication group's Raft epochs): the start
of the first epoch above the one asked, with the largest epoch at or below it; the log end for
the leader's current epoch; UNDEFINED (-1, -1) for an epoch above every one known. Only the
leader answers (NOT_LEADER_OR_FOLLOWER elsewhere, as Kafka's `fetchOnlyFromLeader`), after the
client's current leader epoch is checked (fencing.py). Requests from followers (replica id
>= 0) are answered the same way: Kaska's brokers replicate through their own protocol.

In Kaska a consumer reads only committed batches, and Raft never truncates them, so the answer
is never below a consumer's position: the check passes, the consumer goes on where it was.
"""

from __future__ import annotations

from kafka.protocol.consumer import OffsetForLeaderEpochResponse

from common.kaska.errors import KaskaError
from services.broker.kafka.context import KafkaContext
from services.broker.kafka.errors import NONE, kafka_code
from services.broker.kafka.fencing import led_partition_at
from services.broker.storage.leader_epochs import UNDEFINED_EPOCH, UNDEFINED_OFFSET

TopicAnswer = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
PartitionAnswer = TopicAnswer.EpochEndOffset


def handle(kctx: KafkaContext, request) -> OffsetForLeaderEpochResponse:
    topics = [
        TopicAnswer(
            topic=topic.topic, partitions=[_answer(kctx, topic.topic, p) for p in topic.partitions]
        )
        for topic in request.topics
    ]
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)


def _answer(kctx: KafkaContext, topic: str, wanted):
    answer = PartitionAnswer(
        error_code=NONE,
        partition=wanted.partition,
        leader_epoch=UNDEFINED_EPOCH,
        end_offset=UNDEFINED_OFFSET,
    )
    try:
        partition, current_epoch = led_partition_at(
            kctx, topic, wanted.partition, wanted.current_leader_epoch
        )
        answer.leader_epoch, answer.end_offset = partition.log.end_offset_for_epoch(
            wanted.leader_epoch, current_epoch
        )
    except KaskaError as error:
        answer.error_code = kafka_code(error)
    return answer
