"""REPLICA_FETCH (broker to broker): a follower pulls journal entries from the leader of one
replication group (the group its signed stamp names), from that group's Log.

The answer is the consumer FETCH path again: a small prefix in memory (the entry headers), then
every BATCH entry's bytes straight from the segment files with `os.sendfile`, in entry order.
A batch the leader no longer has (its topic deleted, or retention) goes as a SKIPPED entry.
Only a signed request from the follower itself gets this far; the answer's signature covers the
data section too (peer_gate.py).
"""

from __future__ import annotations

from dataclasses import replace

from common.kaska.errors import UnknownServerError, UnknownTopicOrPartitionError
from common.kaska.protocol.replica_fetch import EntryHeader, EntryKind, ReplicaFetchRequest
from common.kaska.protocol.replication_bounds import check_fetch_request
from services.broker.body import RequestBody
from services.broker.context import BrokerContext
from services.broker.handlers.common import read_peer_request
from services.broker.replication.journal import JournalEntry
from services.broker.reply import Reply
from services.broker.storage.log import Log
from services.broker.storage.partition import FileSlice


def handle(ctx: BrokerContext, body: RequestBody) -> Reply:
    peer = read_peer_request(ctx, body, ReplicaFetchRequest, check_fetch_request,
                             claimed=lambda request: request.follower)
    group = ctx.replicas.group(peer.stamp.group)
    response, entries = group.node.answer_fetch(peer.request, peer.stamp, body.session)
    headers: list[EntryHeader] = []
    slices: list[FileSlice] = []
    for entry in entries:
        if entry.kind is EntryKind.BATCH and not _visible(group.log, entry):
            break  # journaled a moment before its batch is published: the next fetch
        found = _batch_slices(group.log, entry) if entry.kind is EntryKind.BATCH else None
        if found is not None:
            slices.extend(found)
        headers.append(_header(entry, found is not None))
    response = replace(response, entries=tuple(headers))
    records = sum(header.record_count for header in headers if header.data_bytes)
    prefix = response.encode_prefix()
    return Reply(prefix, slices, records=records, trailer=ctx.peer_gate.seal(peer, prefix, slices))


def _header(entry: JournalEntry, with_bytes: bool) -> EntryHeader:
    kind = entry.kind
    if kind is EntryKind.BATCH and not with_bytes:
        kind = EntryKind.SKIPPED
    return EntryHeader(entry.index, entry.epoch, kind, entry.topic, entry.partition,
                       entry.base_offset, entry.record_count, entry.partitions,
                       entry.batch_bytes if with_bytes else 0)


def _visible(group_log: Log, entry: JournalEntry) -> bool:
    """The leader journals a batch under the partition lock just before it publishes it, so a
    fetch may see the entry a moment before the bytes."""
    try:
        return group_log.partition(entry.topic, entry.partition).log_end_offset \
            >= entry.end_offset
    except UnknownTopicOrPartitionError:
        return True  # deleted since: sent as SKIPPED


def _batch_slices(group_log: Log, entry: JournalEntry) -> list[FileSlice] | None:
    """The file slices of exactly this entry's batch, or None when the leader lost them."""
    try:
        partition = group_log.partition(entry.topic, entry.partition)
    except UnknownTopicOrPartitionError:
        return None
    if entry.base_offset < partition.log_start_offset:
        return None
    slices = partition.read(entry.base_offset, entry.batch_bytes, upto_offset=entry.end_offset)
    if sum(piece.nbytes for piece in slices) != entry.batch_bytes:
        # The journal and the log disagree: never send a follower something else.
        raise UnknownServerError(f"journal entry {entry.index} says {entry.batch_bytes} bytes "
                                 f"at {entry.topic}/{entry.partition}@{entry.base_offset}, "
                                 "the log has others")
    return slices
