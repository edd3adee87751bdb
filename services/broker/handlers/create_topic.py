"""CREATE_TOPIC: journaled by the leader, answered once a majority of brokers has it."""

from __future__ import annotations

from common.kaska.protocol.create_topic import CreateTopicRequest
from services.broker.body import RequestBody
from services.broker.context import BrokerContext
from services.broker.handlers.common import client_writable_topic, read_request
from services.broker.reply import Reply


def handle(ctx: BrokerContext, body: RequestBody) -> Reply:
    request = read_request(ctx, body, CreateTopicRequest)
    client_writable_topic(request.topic)
    ctx.replicas.create_topic(request.topic, request.partitions)
    return Reply()
