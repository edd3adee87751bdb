"""DELETE_TOPIC: tombstones for its committed offsets, then a journaled delete; every broker
removes the files (and wakes the topic's long-polls) once the delete is committed. Version 1
names the incarnation: only that one is deleted (gone already: success; another one live:
UNKNOWN_TOPIC_ID), so a retried delete never removes a topic re-created in between."""

from __future__ import annotations

from common.kaska.protocol.delete_topic import DeleteTopicRequest
from services.broker.context import BrokerContext
from services.broker.handlers.common import client_writable_topic
from services.broker.network.body import RequestBody
from services.broker.network.reply import Reply
from services.broker.replication.journal import TopicId


def handle(ctx: BrokerContext, body: RequestBody) -> Reply:
    request = DeleteTopicRequest.decode(body.read_all(ctx.config.network.control_body_bytes_max),
                                        body.version)
    client_writable_topic(request.topic)
    wanted = None if request.topic_id is None else TopicId(*request.topic_id)
    ctx.topics.delete_topic(request.topic, ctx.offsets.forget_topic, wanted)
    return Reply()
