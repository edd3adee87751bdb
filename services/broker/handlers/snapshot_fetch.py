"""SNAPSHOT_FETCH (broker to broker): a follower installing the leader's journal snapshot copies
the partition bytes the snapshot covers (docs/replication.md "Compaction").

The answer is the REPLICA_FETCH path again: a small prefix, then whole batches straight from
the segment files with `os.sendfile`, signed data section included (network/peer_gate.py). Only
committed bytes of the incarnation the request names are sent (node.answer_snapshot_fetch).
"""

from __future__ import annotations

from services.broker.context import BrokerContext
from services.broker.handlers.common import read_peer_request
from services.broker.network.body import RequestBody
from services.broker.network.reply import Reply
from services.broker.replication.wire.replication_bounds import check_snapshot_fetch_request
from services.broker.replication.wire.snapshot_fetch import SnapshotFetchRequest


def handle(ctx: BrokerContext, body: RequestBody) -> Reply:
    peer = read_peer_request(ctx, body, SnapshotFetchRequest, check_snapshot_fetch_request,
                             claimed=lambda request: request.follower)
    node = ctx.replication[peer.stamp.group].node
    response, slices = node.answer_snapshot_fetch(peer.request)
    prefix = response.encode_prefix()
    return Reply(prefix, slices, trailer=ctx.peer_gate.seal(peer, prefix, slices))
