"""LIST_TOPICS: name → partition count (and, from version 1, incarnation), internal topics only
when asked.

Answered by the metadata group's leader while it holds its lease, from that group's committed
topics: every create or delete acknowledged before the request is in the answer, and a create
not committed yet never is (a leader appends a CREATE_TOPIC, and makes its files, before a
majority has it; truncation may still take it away). Any other broker answers NOT_LEADER
naming that leader, which the client follows. METADATA (metadata.py) is answered everywhere.
"""

from __future__ import annotations

from common.kaska.protocol.list_topics import ListTopicsRequest, ListTopicsResponse
from common.kaska.protocol.topic_id import TopicId as WireTopicId
from common.kaska.topic_name import is_internal
from services.broker.context import BrokerContext
from services.broker.network.body import RequestBody
from services.broker.network.reply import Reply


def handle(ctx: BrokerContext, body: RequestBody) -> Reply:
    request = ListTopicsRequest.decode(body.read_all(ctx.config.network.control_body_bytes_max),
                                       body.version)
    committed = ctx.topics.leader_committed_topics()
    topics = {name: live.partitions for name, live in committed.items()
              if not is_internal(name)}
    topic_ids: dict[str, WireTopicId | None] = {
        name: WireTopicId(*committed[name].topic_id) for name in topics}
    if request.include_internal:
        # Made by every broker for itself at start (`__offsets`), never journaled.
        for name, partitions in ctx.partitions.topics().items():
            if is_internal(name):
                topics[name], topic_ids[name] = partitions, None
    return Reply(ListTopicsResponse(topics, topic_ids).encode(request.version))
