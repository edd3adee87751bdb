"""The leader's side of replication: a node's answers to its peers' VOTE, REPLICA_FETCH and
SNAPSHOT_FETCH requests (`LeaderAnswers`, mixed into `ReplicationNode`, node.py).

They run on request threads (the broker's connections), beside the node's replication loop.
Each turns the request into a state machine event (raft.py), steps it under the node's `_lock`
and reads the answer from the actions; what does not need the node's state (the choice of
entries to send, refusals, the SNAPSHOT_FETCH answer) is in fetch_answers.py.

Thread-safety: as the node's (node.py, "Locks"): `_lock` is taken for each step and for the
final check of an ENTRIES answer, never across a network wait; a long-polling REPLICA_FETCH
waits on `_changed` (`wait_changed`) with `_lock` released.

The lease (raft.holds_lease): a fetch on the session that carried this leader's previous answer
proves the follower read that answer, so it confirms the follower heard from this leader when
the answer was made (`FetchSession.answered`).

Uses the node's attributes: config, raft_config, name, counters, journal, _log, _lock,
_changed, _state, _clock, _peers, _direct_sessions, _commit_sent, and its methods
_step_locked, _first, wait_changed, high_watermark.
"""

from __future__ import annotations

import logging

from common.kaska.errors import UnknownReplicaError
from common.kaska.protocol.metadata import NO_LEADER
from services.broker.network.peer_gate import PeerSession
from services.broker.replication import raft
from services.broker.replication.fetch_answers import (
    FetchSession,
    answer_snapshot_fetch,
    entries_to_send,
    refusal,
)
from services.broker.replication.journal import JournalEntry
from services.broker.replication.wire.peer_auth import RequestStamp
from services.broker.replication.wire.replica_fetch import FetchOutcome as WireOutcome
from services.broker.replication.wire.replica_fetch import ReplicaFetchRequest, ReplicaFetchResponse
from services.broker.replication.wire.snapshot_fetch import (
    SnapshotFetchRequest,
    SnapshotFetchResponse,
)
from services.broker.replication.wire.vote import VoteRequest as WireVoteRequest
from services.broker.replication.wire.vote import VoteResponse as WireVoteResponse
from services.broker.storage.partition import FileSlice

log = logging.getLogger(__name__)


class LeaderAnswers:
    """The peers' requests a node answers (see the module docstring)."""

    def check_peer(self, node_id: int) -> None:
        if node_id not in self._peers:
            self.counters.unknown_replica_requests += 1
            raise UnknownReplicaError(f"node {node_id} is not a configured peer of broker "
                                      f"{self.config.node_id}")

    def answer_vote(self, request: WireVoteRequest) -> WireVoteResponse:
        self.check_peer(request.candidate)
        event = raft.VoteRequest(request.candidate, request.epoch, request.last_epoch,
                                 request.end, request.pre_vote, request.transfer)
        with self._lock:
            if request.epoch < self._state.epoch:
                self.counters.stale_epoch_requests += 1
            answer = self._first(self._step_locked(event), raft.AnswerVote)
        leader = NO_LEADER if answer.leader_id is None else answer.leader_id
        return WireVoteResponse(answer.epoch, answer.granted, leader, answer.pre_vote)

    def holds_lease(self, state: raft.RaftState | None = None) -> bool:
        """Whether this broker leads with a lease now (raft.holds_lease; `state`: a snapshot
        the caller already read), on the clock read at this call: a leader thawed after a
        pause refuses before its loop thread runs."""
        return raft.holds_lease(self.raft_config, state or self._state, self._clock())

    def answer_fetch(self, request: ReplicaFetchRequest, stamp: RequestStamp | None = None,
                     session: FetchSession | PeerSession | None = None
                     ) -> tuple[ReplicaFetchResponse, list[JournalEntry]]:
        """The leader's answer (entries to send come back as journal entries; the caller
        turns them into file slices). Long-polls when the follower is caught up. `stamp`: the
        signed request's, whose broker incarnation and learner flag the state machine reads.

        `session`: the connection the request came on (None: an in-process caller, whose calls
        come one after another). A fetch on the session that carried this leader's previous
        answer proves the follower read that answer (the follower drops its connection after
        any failed fetch), so it confirms the follower heard from this leader at the time the
        answer was made: the lease (raft.holds_lease)."""
        self.check_peer(request.follower)
        if session is None:
            session = self._direct_sessions.setdefault(request.follower, FetchSession())
        answered, session.answered = session.answered, None
        confirmed = answered[1] if answered is not None and answered[0] == request.epoch \
            else None
        event = raft.FetchRequest(request.follower, request.epoch, request.fetch_end,
                                  request.last_fetched_epoch,
                                  stamp.data_incarnation if stamp is not None else 0,
                                  stamp.learner if stamp is not None else False, confirmed)
        with self._lock:
            if request.epoch < self._state.epoch:
                self.counters.stale_epoch_requests += 1
            known = self._state.incarnations.get(request.follower)
            if event.incarnation and known not in (None, event.incarnation):
                self.counters.peer_incarnation_changes += 1
                log.warning("%s: peer %d came back as another incarnation (%d, was "
                            "%d): its data directory was replaced; its match starts again "
                            "from 0", self.name, request.follower,
                            event.incarnation, known)
            lapsed = not self.holds_lease()
            answer = self._first(self._step_locked(event), raft.AnswerFetch)
            if lapsed and self.holds_lease():
                self._changed.notify_all()  # writes waiting for the lease (replica_manager)
        if answer.outcome is raft.Outcome.SNAPSHOT:
            # Any snapshot at or past the state machine's start covers fetch_end.
            return ReplicaFetchResponse(answer.epoch, self.config.node_id, answer.commit,
                                        WireOutcome.SNAPSHOT,
                                        snapshot=self.journal.snapshot), []
        if answer.outcome is not raft.Outcome.ENTRIES:
            if answer.outcome is raft.Outcome.DIVERGING:
                session.answered = (answer.epoch, self._clock())
            elif answer.outcome is raft.Outcome.TIMEOUT_NOW:
                self.counters.transfers_handed_over += 1
                log.warning("%s: handed leadership of epoch %d to broker %d and "
                            "stepped down", self.name, answer.epoch,
                            request.follower)
            return refusal(answer), []
        epoch = answer.epoch
        if request.max_wait_ms and self.journal.end <= request.fetch_end:
            # Not while the follower has not been sent the commit index (a follower learns
            # commits only from answers: a committed delete or create must reach every copy
            # at once, not a long-poll later, and the fetch itself may have advanced it);
            # woken by a commit advance for the same reason, by a hand-over to this
            # follower (it asks again at once and is told to stand; the others' long-polls
            # wait on: woken, they would spin) and by a step-down (the follower must look
            # for the next leader, not wait).
            # A new connection (or one after a failed answer) may be a restarted follower.
            sent = self._commit_sent.get(request.follower, -1) if answered is not None else -1
            self.wait_changed(lambda: self.journal.end > request.fetch_end
                              or self._state.commit > sent
                              or self._state.epoch != epoch
                              or self._state.role is not raft.Role.LEADER
                              or self._state.transfer_to == request.follower,
                              request.max_wait_ms / 1000)
        with self._lock:
            # Still the leader of that epoch? (Between the step and now it may have stepped
            # down and taken another leader's entries: never send those as its own.)
            state = self._state
            if state.role is not raft.Role.LEADER or state.epoch != epoch:
                leader = NO_LEADER if state.leader_id is None else state.leader_id
                return ReplicaFetchResponse(state.epoch, leader, state.commit,
                                            WireOutcome.NOT_LEADER), []
            if request.fetch_end < self.journal.start:
                # Compacted since the step (the loop compacts outside _lock): the snapshot.
                return ReplicaFetchResponse(epoch, self.config.node_id, state.commit,
                                            WireOutcome.SNAPSHOT,
                                            snapshot=self.journal.snapshot), []
            entries = entries_to_send(self.journal, self.config, request.fetch_end,
                                      request.max_bytes)
            commit = state.commit
            self._commit_sent[request.follower] = commit
        session.answered = (epoch, self._clock())
        return ReplicaFetchResponse(epoch, self.config.node_id, commit,
                                    WireOutcome.ENTRIES), entries

    def answer_snapshot_fetch(self, request: SnapshotFetchRequest
                              ) -> tuple[SnapshotFetchResponse, list[FileSlice]]:
        """The leader's side of SNAPSHOT_FETCH (fetch_answers.py): committed bytes of the
        incarnation the request names, below its `end_offset` and the high watermark."""
        self.check_peer(request.follower)
        return answer_snapshot_fetch(request, self._state, self.journal, self._log, self.config,
                                     self.high_watermark)
