"""CREATE_TOPIC: journaled by the leader, answered once a majority of brokers has it (from
version 1 with the incarnation it made); TOPIC_ALREADY_EXISTS only once the existing
incarnation is committed (cluster/replica_manager.py)."""

from __future__ import annotations

from common.kaska.protocol.create_topic import CreateTopicRequest, CreateTopicResponse
from common.kaska.protocol.topic_id import TopicId as WireTopicId
from services.broker.context import BrokerContext
from services.broker.handlers.common import client_writable_topic
from services.broker.network.body import RequestBody
from services.broker.network.reply import Reply


def handle(ctx: BrokerContext, body: RequestBody) -> Reply:
    request = CreateTopicRequest.decode(body.read_all(ctx.config.network.control_body_bytes_max),
                                        body.version)
    client_writable_topic(request.topic)
    topic_id = ctx.topics.create_topic(request.topic, request.partitions)
    return Reply(CreateTopicResponse(WireTopicId(*topic_id)).encode(request.version))
