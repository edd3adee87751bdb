"""ListOffsets (api key 2, v1..7): the earliest (-2) and latest (-1) offsets of partitions this
broker leads, and the offset of a timestamp. Latest is the high watermark (and, without
transactions, the last stable offset, so read_committed asks alike). A timestamp >= 0 answers
the earliest record from the log start, in the committed batches, whose timestamp is at or
after it, with that record's timestamp (../storage/timestamps.py: the segments' time indexes);
none: offset and timestamp -1, as Kafka's. -3, the largest timestamp (KIP-734), is answered
INVALID_REQUEST: the segments know their largest batch timestamp, not the largest committed
record's (the active segment's may lie above the high watermark). The client's current leader
epoch (v4+) is checked first (fencing.py).
"""

from __future__ import annotations

from kafka.protocol.consumer import ListOffsetsResponse

from common.kaska.errors import InvalidRequestError, KaskaError
from services.broker.kafka.context import KafkaContext
from services.broker.kafka.errors import NONE, kafka_code
from services.broker.kafka.fencing import led_partition_at

LATEST = -1
EARLIEST = -2
NO_TIMESTAMP = -1
NO_OFFSET = -1

TopicAnswer = ListOffsetsResponse.ListOffsetsTopicResponse
PartitionAnswer = TopicAnswer.ListOffsetsPartitionResponse


def handle(kctx: KafkaContext, request) -> ListOffsetsResponse:
    topics = [TopicAnswer(name=topic.name,
                          partitions=[_answer(kctx, topic.name, p) for p in topic.partitions])
              for topic in request.topics]
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)


def _answer(kctx: KafkaContext, topic: str, wanted):
    answer = PartitionAnswer(partition_index=wanted.partition_index, error_code=NONE,
                             timestamp=NO_TIMESTAMP, offset=NO_OFFSET, leader_epoch=-1)
    try:
        partition, answer.leader_epoch = led_partition_at(kctx, topic, wanted.partition_index,
                                                          wanted.current_leader_epoch)
        if wanted.timestamp == EARLIEST:
            answer.offset = partition.log_start_offset
        elif wanted.timestamp == LATEST:
            answer.offset = partition.high_watermark()
        elif wanted.timestamp >= 0:
            found = partition.log.offset_for_timestamp(wanted.timestamp,
                                                       upto_offset=partition.high_watermark())
            if found is not None:
                answer.timestamp, answer.offset = found
        else:
            raise InvalidRequestError(f"offset lookup by timestamp {wanted.timestamp} is not "
                                      "supported")
    except KaskaError as error:
        answer.error_code = kafka_code(error)
    return answer
