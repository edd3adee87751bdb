"""COMMIT_OFFSET: stored as a record in `__offsets`, then served from memory."""

from __future__ import annotations

from common.kaska.errors import InvalidRequestError
from common.kaska.protocol.commit_offset import CommitOffsetRequest
from common.kaska.topic_name import OFFSETS_TOPIC
from services.broker.cluster.committed_offsets import OFFSETS_PARTITION, validate_group
from services.broker.context import BrokerContext
from services.broker.handlers.common import find_partition, read_request
from services.broker.network.body import RequestBody
from services.broker.network.reply import Reply


def handle(ctx: BrokerContext, body: RequestBody) -> Reply:
    request = read_request(ctx, body, CommitOffsetRequest)
    validate_group(request.group)
    find_partition(ctx, request.topic, request.partition)
    ctx.replication.require_leader(OFFSETS_TOPIC, OFFSETS_PARTITION)
    if request.offset < 0:
        raise InvalidRequestError(f"committed offset {request.offset} is negative")
    ctx.offsets.commit(request.group, request.topic, request.partition, request.offset)
    return Reply()
