"""InitProducerId (api key 22, v0..4): an id and epoch for an idempotent producer
(producer_ids.py). Any broker answers; no state is kept (the producer tables of the partitions
are the state). A transactional id is refused: Kaska has no transactions."""

from __future__ import annotations

from kafka.protocol.producer import InitProducerIdResponse

from services.broker.kafka.context import KafkaContext
from services.broker.kafka.errors import INVALID_REQUEST, NONE
from services.broker.kafka.producer_ids import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, next_identity


def handle(kctx: KafkaContext, request) -> InitProducerIdResponse:
    if request.transactional_id is not None:
        return InitProducerIdResponse(throttle_time_ms=0, error_code=INVALID_REQUEST,
                                      producer_id=NO_PRODUCER_ID,
                                      producer_epoch=NO_PRODUCER_EPOCH)
    current_id = request.producer_id if request.version >= 3 else NO_PRODUCER_ID
    current_epoch = request.producer_epoch if request.version >= 3 else NO_PRODUCER_EPOCH
    producer_id, epoch = next_identity(kctx.rng, current_id, current_epoch)
    return InitProducerIdResponse(throttle_time_ms=0, error_code=NONE, producer_id=producer_id,
                                  producer_epoch=epoch)
