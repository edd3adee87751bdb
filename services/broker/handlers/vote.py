"""VOTE (broker to broker): a pre-vote or vote of the replication election. The state machine
decides; the vote is persisted before this answer leaves (replication/node.py)."""

from __future__ import annotations

from common.kaska.protocol.vote import VoteRequest
from services.broker.body import RequestBody
from services.broker.context import BrokerContext
from services.broker.handlers.common import read_request
from services.broker.reply import Reply


def handle(ctx: BrokerContext, body: RequestBody) -> Reply:
    request = read_request(ctx, body, VoteRequest)
    return Reply(ctx.replicas.node.answer_vote(request).encode())
