"""LIST_TOPICS: name → partition count (internal topics only when asked)."""

from __future__ import annotations

from common.kaska.protocol.list_topics import ListTopicsRequest, ListTopicsResponse
from common.kaska.topic_name import is_internal
from services.broker.body import RequestBody
from services.broker.context import BrokerContext
from services.broker.handlers.common import read_request
from services.broker.reply import Reply


def handle(ctx: BrokerContext, body: RequestBody) -> Reply:
    request = read_request(ctx, body, ListTopicsRequest)
    topics = {name: partitions for name, partitions in ctx.log.topics().items()
              if request.include_internal or not is_internal(name)}
    return Reply(ListTopicsResponse(topics).encode())
