"""The leader's side of replication reads, the parts that need no node lock of their own: the
memory of one follower connection (`FetchSession`), the refusals of a REPLICA_FETCH, which
journal entries one answer carries (`entries_to_send`), and the whole answer to a
SNAPSHOT_FETCH (`answer_snapshot_fetch`).

`LeaderAnswers.answer_fetch` (leader_answers.py) keeps the REPLICA_FETCH itself: it steps the
state machine under the node's `_lock`, long-polls on its condition and checks the leadership
again under the lock before it reads the entries (`entries_to_send` runs there, under `_lock`).

Invariants:
- an answer carries at most `fetch_entries_max` entries and, past its first entry, at most
  min(request's max_bytes, `fetch_bytes_max`) bytes of batches: the first entry always goes,
  so a batch larger than the budget still replicates;
- SNAPSHOT_FETCH sends only committed bytes (below the high watermark and the request's end) of
  the very topic incarnation the request names; a deleted or re-created topic is GONE, and only
  the leader of the request's epoch answers with data.

Threads: request threads (one per peer connection). A `FetchSession` is owned by its
connection's thread (fetches on one connection come one after another); the rest reads the
state machine's state (an immutable snapshot) and the journal and partitions, which guard
themselves with their own locks.
"""

from __future__ import annotations

from collections.abc import Callable

from common.kaska.errors import UnknownTopicOrPartitionError
from common.kaska.protocol.metadata import NO_LEADER
from services.broker.replication import raft
from services.broker.replication.config import ReplicationConfig
from services.broker.replication.journal import Journal, JournalEntry
from services.broker.replication.wire.replica_fetch import FetchOutcome as WireOutcome
from services.broker.replication.wire.replica_fetch import ReplicaFetchResponse
from services.broker.replication.wire.snapshot_fetch import (
    NO_TOPIC_ID,
    SnapshotFetchOutcome,
    SnapshotFetchRequest,
    SnapshotFetchResponse,
)
from services.broker.storage.errors import PartitionClosedError
from services.broker.storage.log import Log
from services.broker.storage.partition import FileSlice


class FetchSession:
    """The leader's memory of one follower connection: (epoch, time) of the last fetch answer
    it made on it, None when the last request got no answer of a leader. Owned by the
    connection's thread (fetches on one connection come one after another)."""

    __slots__ = ("answered",)

    def __init__(self) -> None:
        self.answered: tuple[int, float] | None = None


def refusal(answer: raft.AnswerFetch) -> ReplicaFetchResponse:
    """The wire answer of a fetch the state machine did not answer with entries."""
    leader = NO_LEADER if answer.leader_id is None else answer.leader_id
    if answer.outcome is raft.Outcome.DIVERGING:
        return ReplicaFetchResponse(answer.epoch, leader, answer.commit,
                                    WireOutcome.DIVERGING,
                                    diverging_epoch=answer.diverging_epoch,
                                    diverging_end=answer.diverging_end)
    if answer.outcome is raft.Outcome.TIMEOUT_NOW:
        return ReplicaFetchResponse(answer.epoch, leader, answer.commit,
                                    WireOutcome.TIMEOUT_NOW)
    return ReplicaFetchResponse(answer.epoch, leader, answer.commit, WireOutcome.NOT_LEADER)


def entries_to_send(journal: Journal, config: ReplicationConfig, start: int,
                    max_bytes: int) -> list[JournalEntry]:
    stop = min(journal.end, start + config.fetch_entries_max)
    budget = min(max_bytes, config.fetch_bytes_max)
    chosen: list[JournalEntry] = []
    for entry in journal.entries(start, stop):
        if chosen and entry.batch_bytes > budget:
            break
        budget -= entry.batch_bytes
        chosen.append(entry)
    return chosen


def answer_snapshot_fetch(request: SnapshotFetchRequest, state: raft.RaftState,
                          journal: Journal, log_store: Log, config: ReplicationConfig,
                          high_watermark: Callable[[str, int], int]
                          ) -> tuple[SnapshotFetchResponse, list[FileSlice]]:
    """The leader's side of SNAPSHOT_FETCH: committed bytes of the incarnation the request
    names, from the batch holding `offset`, below `end_offset` and the high watermark.
    `state`: the state machine's, read once by the caller after checking the peer."""
    if state.role is not raft.Role.LEADER or state.epoch != request.epoch:
        leader = NO_LEADER if state.leader_id is None else state.leader_id
        return SnapshotFetchResponse(state.epoch, leader,
                                     SnapshotFetchOutcome.NOT_LEADER), []
    gone = SnapshotFetchResponse(state.epoch, config.node_id,
                                 SnapshotFetchOutcome.GONE), []
    current = journal.incarnation(request.topic)
    named = None if request.id_epoch == NO_TOPIC_ID else (request.id_epoch,
                                                            request.id_index)
    if current != named or request.partition >= log_store.topics().get(request.topic, 0):
        return gone
    try:
        partition = log_store.partition(request.topic, request.partition)
        # The bytes held (whole batches), below a DeleteRecords log start too: the snapshot's
        # log starts move the follower's start afterwards (EntryEffects.enforce_log_starts).
        start = partition.held_start_offset
        upto = min(request.end_offset, high_watermark(request.topic, request.partition),
                   partition.log_end_offset)
        offset = max(request.offset, start)
        slices = partition.read(offset, min(request.max_bytes, config.fetch_bytes_max),
                                upto_offset=upto, below_start=True) if offset < upto else []
    except (UnknownTopicOrPartitionError, PartitionClosedError):
        return gone  # deleted meanwhile
    return SnapshotFetchResponse(state.epoch, config.node_id, SnapshotFetchOutcome.DATA,
                                 start), slices
