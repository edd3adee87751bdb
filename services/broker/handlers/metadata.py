"""METADATA: the brokers, the leader of every partition of the topics asked about (its
replication group's), and the controller (the metadata group's leader)."""

from __future__ import annotations

from common.kaska.protocol.metadata import MetadataRequest, MetadataResponse, PartitionInfo
from services.broker.body import RequestBody
from services.broker.context import BrokerContext
from services.broker.handlers.common import read_request
from services.broker.reply import Reply


def handle(ctx: BrokerContext, body: RequestBody) -> Reply:
    request = read_request(ctx, body, MetadataRequest)
    existing = ctx.log.topics()
    wanted = request.topics or tuple(existing)
    topics = {}
    withheld = False
    for name in wanted:
        partitions = existing.get(name)
        if partitions is None:
            continue
        roles = [ctx.replicas.role(name, p) for p in range(partitions)]
        withheld = withheld or any(role.lease_expired for role in roles)
        topics[name] = tuple(PartitionInfo(p, role.leader_id, role.leader_epoch)
                             for p, role in enumerate(roles))
    controller = ctx.replicas.controller_role()
    if withheld or controller.lease_expired:
        # a leader without its lease names no leader (not itself): counted once
        ctx.replicas.lease_refused()
    return Reply(MetadataResponse(ctx.replicas.brokers(), topics, controller.leader_id,
                                  controller.leader_epoch).encode())
