"""VOTE (broker to broker): a pre-vote or vote of the replication election. The state machine
decides; the vote is persisted before this answer leaves (replication/node.py). Only a signed
request from the candidate itself gets this far, and the answer is signed (network/peer_gate.py)."""

from __future__ import annotations

from services.broker.context import BrokerContext
from services.broker.handlers.common import read_peer_request
from services.broker.network.body import RequestBody
from services.broker.network.reply import Reply
from services.broker.replication.wire.replication_bounds import check_vote_request
from services.broker.replication.wire.vote import VoteRequest


def handle(ctx: BrokerContext, body: RequestBody) -> Reply:
    peer = read_peer_request(ctx, body, VoteRequest, check_vote_request,
                             claimed=lambda request: request.candidate)
    node = ctx.replication[peer.stamp.group].node
    answer = node.answer_vote(peer.request).encode()
    return Reply(answer, trailer=ctx.peer_gate.seal(peer, answer))
