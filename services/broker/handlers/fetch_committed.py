"""FETCH_COMMITTED: a group's committed offset, or -1."""

from __future__ import annotations

from common.kaska.protocol.fetch_committed import (
    NO_COMMITTED_OFFSET,
    FetchCommittedRequest,
    FetchCommittedResponse,
)
from common.kaska.topic_name import OFFSETS_TOPIC
from services.broker.cluster.committed_offsets import OFFSETS_PARTITION, validate_group
from services.broker.context import BrokerContext
from services.broker.handlers.common import find_partition, read_request
from services.broker.network.body import RequestBody
from services.broker.network.reply import Reply


def handle(ctx: BrokerContext, body: RequestBody) -> Reply:
    request = read_request(ctx, body, FetchCommittedRequest)
    validate_group(request.group)
    find_partition(ctx, request.topic, request.partition)
    ctx.replication.require_leader(OFFSETS_TOPIC, OFFSETS_PARTITION)
    offset = ctx.offsets.committed(request.group, request.topic, request.partition)
    return Reply(FetchCommittedResponse(NO_COMMITTED_OFFSET if offset is None
                                        else offset).encode())
