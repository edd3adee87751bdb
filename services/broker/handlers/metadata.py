"""METADATA: the brokers, the leader of every partition of the topics asked about (its
replication group's), and the controller (the metadata group's leader).

Every broker answers, from its metadata cache: the metadata group's committed topics on this
broker (Kafka's brokers serve their replicated metadata cache, which holds only committed
records). It may lag the leader's by a fetch round, so a topic just created may be missing
(clients retry UNKNOWN_TOPIC_OR_PARTITION), but it never lists a create that is not committed;
LIST_TOPICS is the authoritative list."""

from __future__ import annotations

from common.kaska.protocol.metadata import MetadataRequest, MetadataResponse, PartitionInfo
from common.kaska.topic_name import is_internal
from services.broker.context import BrokerContext
from services.broker.handlers.common import read_request
from services.broker.network.body import RequestBody
from services.broker.network.reply import Reply


def handle(ctx: BrokerContext, body: RequestBody) -> Reply:
    request = read_request(ctx, body, MetadataRequest)
    existing = cached_topics(ctx)
    wanted = request.topics or tuple(existing)
    topics = {}
    withheld = False
    for name in wanted:
        partitions = existing.get(name)
        if partitions is None:
            continue
        roles = [ctx.replication.role(name, p) for p in range(partitions)]
        withheld = withheld or any(role.lease_expired for role in roles)
        topics[name] = tuple(PartitionInfo(p, role.leader_id, role.leader_epoch)
                             for p, role in enumerate(roles))
    controller = ctx.replication.controller_role()
    if withheld or controller.lease_expired:
        # a leader without its lease names no leader (not itself): counted once
        ctx.replication.lease_refused()
    return Reply(MetadataResponse(ctx.replication.brokers(), topics, controller.leader_id,
                                  controller.leader_epoch).encode())


def cached_topics(ctx: BrokerContext) -> dict[str, int]:
    """Topic → partition count: the metadata group's committed topics on this broker, and the
    internal topics every broker makes for itself (`__offsets`, never journaled)."""
    topics = {name: live.partitions for name, live in ctx.topics.committed_topics().items()
              if not is_internal(name)}
    topics.update((name, count) for name, count in ctx.partitions.topics().items()
                  if is_internal(name))
    return topics
