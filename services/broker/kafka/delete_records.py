"""DeleteRecords (api key 21, v0..2; KIP-107): move partitions' log starts forward, through the
very mechanism of Kaska's DELETE_RECORDS (../handlers/delete_records.py): the partition's
leader journals a DELETE_RECORDS entry in its replication group, every replica moves its log
start (and deletes its segments wholly below it) once the entry is committed
(docs/replication.md, "What DeleteRecords promises"). Each partition is answered on its own:
its log start after the move (the low watermark), or NOT_LEADER_OR_FOLLOWER on a broker that
does not lead it (a lapsed lease is waited for as a write's), OFFSET_OUT_OF_RANGE above the
high watermark or below -1 (-1 is the high watermark), UNKNOWN_TOPIC_OR_PARTITION, an internal
topic INVALID_TOPIC_EXCEPTION, NOT_ENOUGH_REPLICAS when a majority does not confirm within the
group's ack timeout (the request's timeout_ms is not used: Kaska's one ack timeout bounds every
replicated write). All entries are journaled first, then waited for on the connection's answer
thread (a DeferredResponse, as a Produce's acks), so n partitions cost one commit round.
"""

from __future__ import annotations

from collections.abc import Callable

from kafka.protocol.admin import DeleteRecordsResponse

from common.kaska.errors import KaskaError
from services.broker.handlers.common import client_writable_topic, find_partition
from services.broker.kafka.answers import DeferredResponse
from services.broker.kafka.context import KafkaContext
from services.broker.kafka.errors import NONE, kafka_code

NO_LOW_WATERMARK = -1

TopicAnswer = DeleteRecordsResponse.DeleteRecordsTopicResult
PartitionAnswer = TopicAnswer.DeleteRecordsPartitionResult

Outcome = Callable[[], int] | KaskaError


def handle(kctx: KafkaContext, request) -> DeferredResponse:
    started = [
        (
            topic.name,
            [
                (p.partition_index, _start(kctx, topic.name, p.partition_index, p.offset))
                for p in topic.partitions
            ],
        )
        for topic in request.topics
    ]

    def finish() -> DeleteRecordsResponse:
        topics = [
            TopicAnswer(
                name=name, partitions=[_finish(index, outcome) for index, outcome in partitions]
            )
            for name, partitions in started
        ]
        return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)

    return DeferredResponse(finish)


def _start(kctx: KafkaContext, topic: str, index: int, offset: int) -> Outcome:
    """The wait for this partition's move (returning its log start), or the error that
    answers it."""
    try:
        client_writable_topic(topic)
        return find_partition(kctx.broker, topic, index).delete_records_deferred(offset)
    except KaskaError as error:
        return error


def _finish(index: int, outcome: Outcome):
    if not isinstance(outcome, KaskaError):
        try:
            return PartitionAnswer(partition_index=index, low_watermark=outcome(), error_code=NONE)
        except KaskaError as error:
            outcome = error
    return PartitionAnswer(
        partition_index=index, low_watermark=NO_LOW_WATERMARK, error_code=kafka_code(outcome)
    )
