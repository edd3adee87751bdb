"""The ranges every number of a replication frame must lie in before a broker adopts it.

The wire widths (i32 epochs, i64 indexes) are far wider than what a cluster ever reaches, and a
value near the top of its width is poison: an epoch of 2**31-1 adopted by a voter makes its next
pre-vote (epoch + 1) unencodable. So every number is held to a range with room above it:

- epochs: 0..EPOCH_MAX (2**30: one election a second for 34 years), which leaves a pre-vote's
  epoch + 1 encodable;
- journal indexes and partition offsets: 0..INDEX_MAX / OFFSET_MAX (2**62);
- node ids: 0..NODE_ID_MAX; a leader id may also be NO_LEADER (-1);
- partitions: an entry's partition below PARTITIONS_MAX, a CREATE_TOPIC's count up to it
  (the broker's storage bound, services/broker/storage/log.py);
- a follower's long-poll: at most FETCH_WAIT_MS_MAX;
- a snapshot table (a SNAPSHOT answer): epochs ascending, every index below its end.

Each check raises `OutOfRangeFieldError` (peer_auth.py) naming the field; the receiver refuses
the whole frame. Pure functions; thread-safe.
"""

from __future__ import annotations

from common.kaska.protocol.metadata import NO_LEADER
from services.broker.replication.wire.peer_auth import OutOfRangeFieldError
from services.broker.replication.wire.replica_fetch import (
    NO_DIVERGENCE,
    EntryKind,
    FetchOutcome,
    ReplicaFetchRequest,
    ReplicaFetchResponse,
)
from services.broker.replication.wire.snapshot_fetch import (
    NO_TOPIC_ID,
    Snapshot,
    SnapshotFetchRequest,
    SnapshotFetchResponse,
)
from services.broker.replication.wire.vote import VoteRequest, VoteResponse

EPOCH_MAX = 2**30
INDEX_MAX = 2**62
OFFSET_MAX = 2**62
NODE_ID_MAX = 2**16 - 1
PARTITIONS_MAX = 1024
FETCH_WAIT_MS_MAX = 60_000


def in_range(field: str, value: int, low: int, high: int) -> int:
    if not low <= value <= high:
        raise OutOfRangeFieldError(field, value, low, high)
    return value


def _leader(field: str, value: int) -> None:
    if value != NO_LEADER:
        in_range(field, value, 0, NODE_ID_MAX)


def check_vote_request(request: VoteRequest) -> VoteRequest:
    in_range("candidate", request.candidate, 0, NODE_ID_MAX)
    in_range("epoch", request.epoch, 0, EPOCH_MAX)
    in_range("last_epoch", request.last_epoch, 0, EPOCH_MAX)
    in_range("end", request.end, 0, INDEX_MAX)
    return request


def check_vote_response(response: VoteResponse) -> VoteResponse:
    in_range("epoch", response.epoch, 0, EPOCH_MAX)
    _leader("leader_id", response.leader_id)
    return response


def check_fetch_request(request: ReplicaFetchRequest) -> ReplicaFetchRequest:
    in_range("follower", request.follower, 0, NODE_ID_MAX)
    in_range("epoch", request.epoch, 0, EPOCH_MAX)
    in_range("fetch_end", request.fetch_end, 0, INDEX_MAX)
    in_range("last_fetched_epoch", request.last_fetched_epoch, 0, EPOCH_MAX)
    in_range("max_wait_ms", request.max_wait_ms, 0, FETCH_WAIT_MS_MAX)
    return request


def check_fetch_response(response: ReplicaFetchResponse) -> ReplicaFetchResponse:
    in_range("epoch", response.epoch, 0, EPOCH_MAX)
    _leader("leader_id", response.leader_id)
    in_range("commit", response.commit, 0, INDEX_MAX)
    if response.outcome is FetchOutcome.DIVERGING:
        if response.diverging_epoch != NO_DIVERGENCE:
            in_range("diverging_epoch", response.diverging_epoch, 0, EPOCH_MAX)
        if response.diverging_end != NO_DIVERGENCE:
            in_range("diverging_end", response.diverging_end, 0, INDEX_MAX)
    for entry in response.entries:
        in_range("entry index", entry.index, 0, INDEX_MAX)
        in_range("entry epoch", entry.epoch, 0, EPOCH_MAX)
        if entry.kind in (EntryKind.BATCH, EntryKind.SKIPPED):
            in_range("entry partition", entry.partition, 0, PARTITIONS_MAX - 1)
            in_range("entry base_offset", entry.base_offset, 0, OFFSET_MAX)
            in_range("entry end offset", entry.base_offset + entry.record_count, 0, OFFSET_MAX)
        elif entry.kind is EntryKind.CREATE_TOPIC:
            in_range("entry partitions", entry.partitions, 1, PARTITIONS_MAX)
            # A data group's CREATE_TOPIC carries the metadata group's incarnation
            # (journal.py): its epoch + 1 and its index.
            in_range("entry carried id epoch", entry.record_count, 0, EPOCH_MAX + 1)
            in_range("entry carried id index", entry.base_offset, 0, INDEX_MAX)
        elif entry.kind is EntryKind.DELETE_TOPIC:
            # A data group's DELETE_TOPIC carries the metadata group's prefix end it was
            # decided on (journal.py).
            in_range("entry carried metadata end", entry.base_offset, 0, INDEX_MAX)
        elif entry.kind is EntryKind.DELETE_RECORDS:
            in_range("entry partition", entry.partition, 0, PARTITIONS_MAX - 1)
            in_range("entry log start", entry.base_offset, 0, OFFSET_MAX)
    if response.snapshot is not None:
        check_snapshot(response.snapshot)
    return response


def check_snapshot(snapshot: Snapshot) -> Snapshot:
    """A snapshot table (a leader's answer, or this broker's own compacted journal)."""
    in_range("snapshot end", snapshot.end, 0, INDEX_MAX)
    previous = (-1, -1)
    for epoch, start in snapshot.epochs:
        in_range("snapshot epoch", epoch, 0, EPOCH_MAX)
        in_range("snapshot epoch start", start, 0, max(snapshot.end - 1, 0))
        if epoch <= previous[0] or start <= previous[1]:
            raise OutOfRangeFieldError("snapshot epoch order", epoch, previous[0] + 1, EPOCH_MAX)
        previous = (epoch, start)
    for topic in snapshot.topics:
        in_range("snapshot topic id epoch", topic.id_epoch, 0, EPOCH_MAX)
        # Any index: a data group's topic carries the metadata group's id (journal.py).
        in_range("snapshot topic id index", topic.id_index, 0, INDEX_MAX)
        in_range("snapshot topic partitions", topic.partitions, 1, PARTITIONS_MAX)
    for end in snapshot.partition_ends:
        in_range("snapshot partition", end.partition, 0, PARTITIONS_MAX - 1)
        in_range("snapshot partition end", end.end_offset, 0, OFFSET_MAX)
    in_range("snapshot metadata end seen", snapshot.metadata_end_seen, 0, INDEX_MAX)
    for start in snapshot.log_starts:
        in_range("snapshot log start partition", start.partition, 0, PARTITIONS_MAX - 1)
        in_range("snapshot log start", start.end_offset, 0, OFFSET_MAX)
    return snapshot


def check_snapshot_fetch_request(request: SnapshotFetchRequest) -> SnapshotFetchRequest:
    in_range("follower", request.follower, 0, NODE_ID_MAX)
    in_range("epoch", request.epoch, 0, EPOCH_MAX)
    if (request.id_epoch, request.id_index) != (NO_TOPIC_ID, NO_TOPIC_ID):
        in_range("id_epoch", request.id_epoch, 0, EPOCH_MAX)
        in_range("id_index", request.id_index, 0, INDEX_MAX)
    in_range("partition", request.partition, 0, PARTITIONS_MAX - 1)
    in_range("offset", request.offset, 0, OFFSET_MAX)
    in_range("end_offset", request.end_offset, 0, OFFSET_MAX)
    return request


def check_snapshot_fetch_response(response: SnapshotFetchResponse) -> SnapshotFetchResponse:
    in_range("epoch", response.epoch, 0, EPOCH_MAX)
    _leader("leader_id", response.leader_id)
    in_range("log_start_offset", response.log_start_offset, 0, OFFSET_MAX)
    return response
