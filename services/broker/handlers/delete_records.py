"""DELETE_RECORDS (api 11, Kafka's DeleteRecords, KIP-107): move partitions' log starts forward.

Each requested partition is answered on its own (error code + the log start after the
request). For each, this broker must lead it (NOT_LEADER otherwise, as produce answers, with a
lapsed lease waited for as a write waits); an offset of -1 is the high watermark, one above the
high watermark is OFFSET_OUT_OF_RANGE, one at or below the current log start changes nothing
(the current start is answered). Otherwise the leader journals a DELETE_RECORDS entry in the
partition's replication group; every replica moves its log start (and deletes its whole
segments below it) when the entry is committed (docs/replication.md, "What DeleteRecords
promises"). All entries are journaled first, then each is waited for (the group's ack timeout:
NOT_ENOUGH_REPLICAS, retriable), so a request of n partitions costs one commit round, not n.

Whole-request errors: a body that does not parse (counted like every other, never a crash),
an illegal or internal topic, a topic this broker's committed metadata does not hold, a
version 1 topic id that is not the live incarnation (UNKNOWN_TOPIC_ID, nothing moved).
"""

from __future__ import annotations

from collections.abc import Callable

from common.kaska.errors import (
    KaskaError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from common.kaska.protocol.delete_records import (
    NO_LOW_WATERMARK,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    PartitionDelete,
    PartitionDeleted,
)
from services.broker.context import BrokerContext
from services.broker.handlers.common import client_writable_topic
from services.broker.network.body import RequestBody
from services.broker.network.reply import Reply


def handle(ctx: BrokerContext, body: RequestBody) -> Reply:
    request = DeleteRecordsRequest.decode(body.read_all(ctx.config.network.control_body_bytes_max),
                                          body.version)
    client_writable_topic(request.topic)
    _check_incarnation(ctx, request)
    started = [(item, _start(ctx, request.topic, item)) for item in request.partitions]
    answers = tuple(_finish(item, outcome) for item, outcome in started)
    return Reply(DeleteRecordsResponse(answers).encode())


def _check_incarnation(ctx: BrokerContext, request: DeleteRecordsRequest) -> None:
    live = ctx.topics.committed_topics().get(request.topic)
    if live is None:
        raise UnknownTopicOrPartitionError(f"no topic {request.topic!r}")
    if request.topic_id is not None and tuple(live.topic_id) != tuple(request.topic_id):
        raise UnknownTopicIdError(f"topic {request.topic!r} is incarnation "
                                  f"{tuple(live.topic_id)} now, not "
                                  f"{tuple(request.topic_id)}: nothing deleted")


def _start(ctx: BrokerContext, topic: str, item: PartitionDelete
           ) -> Callable[[], int] | KaskaError:
    """The wait for this partition's move (returning its log start), or the error that
    answers it."""
    try:
        return ctx.partitions.get(topic, item.partition).delete_records_deferred(item.offset)
    except KaskaError as error:
        return error


def _finish(item: PartitionDelete, outcome: Callable[[], int] | KaskaError
            ) -> PartitionDeleted:
    if not isinstance(outcome, KaskaError):
        try:
            return PartitionDeleted(item.partition, 0, outcome())
        except KaskaError as error:
            outcome = error
    return PartitionDeleted(item.partition, outcome.code, NO_LOW_WATERMARK)
