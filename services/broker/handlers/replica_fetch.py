"""REPLICA_FETCH (broker to broker): a follower pulls journal entries from the leader of one
replication group (the group its signed stamp names), from that group's Log.

The answer is the consumer FETCH path again: a small prefix in memory (the entry headers), then
every BATCH entry's bytes straight from the segment files with `os.sendfile`, in entry order.
Only a signed request from the follower itself gets this far; the answer's signature covers the
data section too (network/peer_gate.py).

A BATCH entry names its topic's incarnation (`JournalEntry.topic_id`, derived by the journal),
while the partition files are found by topic name, and after a delete and re-create that name
holds another incarnation. So an entry's bytes are read only while the journal's current
incarnation of its topic is the entry's, checked before and after the read (a re-create appends
its CREATE_TOPIC entry and replaces the files in between; either order is caught). An entry of
an incarnation that is gone, or whose bytes the leader no longer has (retention), goes as
SKIPPED, never as bytes of another incarnation; only an entry of the current incarnation whose
batch is not published yet (the leader journals a batch under the partition lock a moment
before it publishes it) ends the answer early.

A follower that fetches again and again from one journal end while the leader holds entries
past it is stalled (follower_progress.py): counted in the group's `followers_stalled` and
logged once per episode.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from common.kaska.errors import UnknownServerError, UnknownTopicOrPartitionError
from services.broker.context import BrokerContext
from services.broker.handlers.common import read_peer_request
from services.broker.network.body import RequestBody
from services.broker.network.peer_gate import PeerSession
from services.broker.network.reply import Reply
from services.broker.replication.fetch_answers import FetchSession
from services.broker.replication.journal import Journal, JournalEntry
from services.broker.replication.node import ReplicationNode
from services.broker.replication.wire.peer_auth import RequestStamp
from services.broker.replication.wire.replica_fetch import (
    EntryHeader,
    EntryKind,
    FetchOutcome,
    ReplicaFetchRequest,
    ReplicaFetchResponse,
)
from services.broker.replication.wire.replication_bounds import check_fetch_request
from services.broker.storage.errors import PartitionClosedError
from services.broker.storage.log import Log
from services.broker.storage.partition import FileSlice

log = logging.getLogger(__name__)


def handle(ctx: BrokerContext, body: RequestBody) -> Reply:
    peer = read_peer_request(ctx, body, ReplicaFetchRequest, check_fetch_request,
                             claimed=lambda request: request.follower)
    group = ctx.replication[peer.stamp.group]
    response, slices = replica_fetch_answer(group.node, group.log, peer.request, peer.stamp,
                                            body.session)
    records = sum(header.record_count for header in response.entries if header.data_bytes)
    prefix = response.encode_prefix()
    return Reply(prefix, slices, records=records, trailer=ctx.peer_gate.seal(peer, prefix, slices))


def replica_fetch_answer(node: ReplicationNode, group_log: Log, request: ReplicaFetchRequest,
                         stamp: RequestStamp | None = None,
                         session: FetchSession | PeerSession | None = None
                         ) -> tuple[ReplicaFetchResponse, list[FileSlice]]:
    """The leader's whole answer to one REPLICA_FETCH of the group `node` runs over
    `group_log`: the response with its entry headers, and the file slices of the batches it
    carries, in entry order (what sendfile sends after the prefix)."""
    response, entries = node.answer_fetch(request, stamp, session)
    headers: list[EntryHeader] = []
    slices: list[FileSlice] = []
    for entry in entries:
        found = _batch_slices(node.journal, group_log, entry) \
            if entry.kind is EntryKind.BATCH else None
        if found is _UNPUBLISHED:
            break  # journaled a moment before its batch is published: the next fetch
        if isinstance(found, list):
            slices.extend(found)
        headers.append(_header(entry, found is not None))
    if response.outcome is FetchOutcome.ENTRIES:
        _watch_progress(node, request)
    return replace(response, entries=tuple(headers)), slices


def _watch_progress(node: ReplicationNode, request: ReplicaFetchRequest) -> None:
    if node.follower_progress.observe(request.follower, request.fetch_end, node.journal.end,
                                      node.clock()):
        node.counters.followers_stalled += 1
        log.warning("%s: follower %d has fetched from journal end %d for %.1f s while this "
                    "leader's journal ends at %d: it makes no progress, and the group runs "
                    "one fault from unavailable", node.name, request.follower,
                    request.fetch_end, node.follower_progress.stall_after_s, node.journal.end)


def _header(entry: JournalEntry, with_bytes: bool) -> EntryHeader:
    kind = entry.kind
    if kind is EntryKind.BATCH and not with_bytes:
        kind = EntryKind.SKIPPED
    return EntryHeader(entry.index, entry.epoch, kind, entry.topic, entry.partition,
                       entry.base_offset, entry.record_count, entry.partitions,
                       entry.batch_bytes if with_bytes else 0)


class _Unpublished:
    """`_batch_slices`' answer for a batch of the current incarnation not yet published."""


_UNPUBLISHED = _Unpublished()


def _batch_slices(journal: Journal, group_log: Log, entry: JournalEntry
                  ) -> list[FileSlice] | _Unpublished | None:
    """The file slices of exactly this entry's batch; None when the leader no longer has
    them (its incarnation deleted or replaced, or retention); `_UNPUBLISHED` when the entry
    is the current incarnation's and its batch is not visible yet."""
    if journal.incarnation(entry.topic) != entry.topic_id:
        return None
    try:
        partition = group_log.partition(entry.topic, entry.partition)
        if partition.log_end_offset < entry.end_offset:
            found = _UNPUBLISHED
        elif entry.base_offset < partition.held_start_offset:
            found = None
        else:
            # Below a DeleteRecords log start but still on disk: a follower holds the same
            # bytes as the leader (its committed DELETE_RECORDS entry hides them there too).
            found = partition.read(entry.base_offset, entry.batch_bytes,
                                   upto_offset=entry.end_offset, below_start=True)
    except (UnknownTopicOrPartitionError, PartitionClosedError):
        return None  # deleted since
    if journal.incarnation(entry.topic) != entry.topic_id:
        return None  # re-created while it was read: those were another incarnation's files
    if isinstance(found, list) and sum(piece.nbytes for piece in found) != entry.batch_bytes:
        # The journal and the log disagree about one incarnation: never send a follower
        # something else.
        raise UnknownServerError(f"journal entry {entry.index} says {entry.batch_bytes} bytes "
                                 f"at {entry.topic}/{entry.partition}@{entry.base_offset}, "
                                 "the log has others")
    return found
