"""DELETE_TOPIC: tombstones for its committed offsets, then a journaled delete; every broker
removes the files (and wakes the topic's long-polls) once the delete is committed."""

from __future__ import annotations

from common.kaska.protocol.delete_topic import DeleteTopicRequest
from services.broker.body import RequestBody
from services.broker.context import BrokerContext
from services.broker.handlers.common import client_writable_topic, read_request
from services.broker.reply import Reply


def handle(ctx: BrokerContext, body: RequestBody) -> Reply:
    request = read_request(ctx, body, DeleteTopicRequest)
    client_writable_topic(request.topic)
    ctx.replicas.delete_topic(request.topic, ctx.offsets.forget_topic)
    return Reply()
