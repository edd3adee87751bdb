"""Produce (api key 0, v3+): each partition's one RecordBatch v2, transcoded (records.py) and
appended through the same partition as a Kaska PRODUCE (cluster/partition.py
`append_deferred`: leader check, producer-table dedup, journal entry, then the wait for the acks
asked for).

acks: 0 (no answer at all, as Kafka), 1 (the leader has it), -1 (a majority has it: the
committed prefix holds the batch's own journal entry). Every partition is appended first, then
their acks are awaited, so a request spanning partitions waits once, not once per partition;
with acks=-1 that wait happens on the connection's answer thread (answers.py), so the
connection reads the producer's next request meanwhile.
A retried idempotent batch is answered with its original base offset (Kafka does the same).
A partition whose records are refused (corrupt, inflating past the log's batch_bytes_max, an
unsupported kind) answers its error and the request is counted under that error's class
(answers.PartlyRefused), not as ok.
Errors are per partition: NOT_LEADER_OR_FOLLOWER makes clients refresh metadata and retry on
the new leader; an append that a majority did not confirm in time answers
NOT_ENOUGH_REPLICAS_AFTER_APPEND (retriable; the idempotent retry is deduplicated).

The request is read whole into memory first (bounded by the listener's request bound): the
transcoding needs it there anyway, so Kaska's zero-copy receive does not apply here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kafka.protocol.producer import ProduceResponse

from common.kaska.errors import (
    CorruptBatchError,
    KaskaError,
    MessageTooLargeError,
    NotEnoughReplicasError,
)
from common.kaska.protocol.produce import ACKS_ALL, ACKS_LEADER
from services.broker.handlers.common import client_writable_topic, led_partition
from services.broker.kafka.answers import DeferredResponse, PartlyRefused
from services.broker.kafka.context import KafkaContext
from services.broker.kafka.errors import (
    INVALID_REQUEST,
    INVALID_REQUIRED_ACKS,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    UnsupportedRecordsError,
    kafka_code,
)
from services.broker.kafka.records import kafka_to_kaska_parts

log = logging.getLogger(__name__)

ACKS_NONE = 0
KAFKA_ACKS = (ACKS_NONE, ACKS_LEADER, ACKS_ALL)
NO_OFFSET = -1
# Refusals of the records themselves (bad input), counted as the request's outcome.
RECORDS_REFUSALS = (CorruptBatchError, MessageTooLargeError, UnsupportedRecordsError)

TopicAnswer = ProduceResponse.TopicProduceResponse
PartitionAnswer = TopicAnswer.PartitionProduceResponse


def handle(kctx: KafkaContext, request
           ) -> ProduceResponse | DeferredResponse | PartlyRefused | None:
    refusal = _refusal(request)
    waits: list[tuple[PartitionAnswer, Callable[[], None]]] = []
    topics = []
    records_refused: list[str] = []
    for topic in request.topic_data:
        answers = []
        for data in topic.partition_data:
            answer = PartitionAnswer(index=data.index, error_code=0, base_offset=NO_OFFSET,
                                     log_append_time_ms=-1, log_start_offset=-1,
                                     record_errors=[], error_message=None)
            answers.append(answer)
            if refusal is not None:
                _fail(answer, *refusal)
                continue
            try:
                waits.append((answer, _append(kctx, topic.name, data, request.acks, answer)))
            except KaskaError as error:
                _fail(answer, kafka_code(error), str(error))
                if isinstance(error, RECORDS_REFUSALS):
                    log.info("kafka produce to %s/%d refused: %s", topic.name, data.index, error)
                    records_refused.append(type(error).__name__)
        topics.append(TopicAnswer(name=topic.name, partition_responses=answers))
    def counted(response: ProduceResponse | None):
        return PartlyRefused(response, records_refused[0]) if records_refused else response

    if request.acks == ACKS_NONE:
        _await_all(waits)  # only the leader check: nothing to wait for
        return counted(None)
    response = ProduceResponse(responses=topics, throttle_time_ms=0)
    if request.acks != ACKS_ALL or not waits:
        _await_all(waits)
        return counted(response)

    def when_acked() -> ProduceResponse | PartlyRefused:
        _await_all(waits)
        return counted(response)

    return DeferredResponse(when_acked)


def _await_all(waits: list[tuple[PartitionAnswer, Callable[[], None]]]) -> None:
    for answer, await_acks in waits:
        try:
            await_acks()
        except NotEnoughReplicasError as error:
            _fail(answer, NOT_ENOUGH_REPLICAS_AFTER_APPEND, str(error))
        except KaskaError as error:
            _fail(answer, kafka_code(error), str(error))


def _refusal(request) -> tuple[int, str] | None:
    if request.acks not in KAFKA_ACKS:
        return INVALID_REQUIRED_ACKS, f"acks {request.acks} is not 0, 1 or -1"
    if request.transactional_id is not None:
        return INVALID_REQUEST, "transactions are not supported"
    return None


def _append(kctx: KafkaContext, topic: str, data, acks: int,
            answer: PartitionAnswer) -> Callable[[], None]:
    """Append one partition's batch now; the callable waits for its acks."""
    ctx = kctx.broker
    client_writable_topic(topic)
    partition = led_partition(ctx, topic, data.index, lease=False)  # waited for
    if data.records is None:
        raise CorruptBatchError("no records")
    header, records = kafka_to_kaska_parts(data.records, partition.log.config.batch_bytes_max)
    split = len(header)

    def fill(region: memoryview) -> None:
        region[:split] = header
        region[split:] = records

    result, await_acks = partition.append_deferred(
        split + len(records), fill, ACKS_ALL if acks == ACKS_ALL else ACKS_LEADER)
    answer.base_offset = result.base_offset
    answer.log_start_offset = partition.log_start_offset
    if result.duplicate:
        log.debug("kafka produce to %s/%d: a retry of the batch at %d", topic, data.index,
                  result.base_offset)
    return await_acks


def _fail(answer: PartitionAnswer, code: int, message: str) -> None:
    answer.error_code = code
    answer.error_message = message
    answer.base_offset = NO_OFFSET
