"""Leadership transfer on the real ReplicationNode, ReplicaManager, Journal and Log:
the leader's `transfer_leadership` (what a SIGTERM runs before the broker stops), the target's
TIMEOUT_NOW, and a voter's answer to a transfer vote. The network is played by hand, as in
test_replication_safety.py: a follower's fetch is `answer_fetch`, a leader's answer is fed to
`_absorb_fetch`; the clock is moved by hand."""

from __future__ import annotations

import threading
import time

import pytest

from common.kaska.errors import NotLeaderError
from services.broker.replication import raft
from services.broker.replication.wire.replica_fetch import FetchOutcome, ReplicaFetchRequest
from services.broker.replication.wire.replica_fetch import ReplicaFetchResponse as WireFetchResponse
from services.broker.replication.wire.vote import VoteRequest as WireVoteRequest
from tests.unit.broker.replication.test_replication_safety import (
    WAIT_S,
    Clock,
    answer,
    cluster_node,
    confirm_lease,
    leader_with_topic,
    produce_deferred,
)
from tests.unit.broker.replication.test_replication_safety import log as log  # noqa: F401 (fixture)
from tests.unit.broker.storage.batches import batch, new_producer_id


def _until(predicate, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        assert time.monotonic() < deadline, f"not {what} within {WAIT_S} s"
        time.sleep(0.002)


class HandOver(threading.Thread):
    """`transfer_leadership` on its own thread (it blocks until the hand-over ends)."""

    def __init__(self, node, target=None, timeout_s=WAIT_S) -> None:
        super().__init__(daemon=True)
        self.node, self.target, self.timeout_s = node, target, timeout_s
        self.result: bool | None = None

    def run(self) -> None:
        self.result = self.node.transfer_leadership(self.timeout_s, self.target)

    def outcome(self) -> bool | None:
        self.join(WAIT_S)
        assert not self.is_alive(), "transfer_leadership did not return"
        return self.result


def _fetch(node, follower: int) -> WireFetchResponse:
    response, _entries = node.answer_fetch(ReplicaFetchRequest(
        follower, node.state.epoch, node.journal.end, node.journal.last_epoch, 1 << 20, 0))
    return response


def test_the_leader_refuses_writes_hands_over_on_the_targets_fetch_and_its_acks_stand(log):
    clock = Clock()
    node, manager = leader_with_topic(log, clock)
    data = batch(b"a", b"b", b"c", producer_id=new_producer_id(), sequence=0)
    result, await_acks = produce_deferred(manager, log, "t", data)  # not replicated yet
    hand_over = HandOver(node, target=3)
    hand_over.start()
    _until(lambda: node.state.transfer_to == 3, "handing over")
    assert node.state.role is raft.Role.LEADER and not node.holds_lease()
    with pytest.raises(NotLeaderError, match="handing leadership over"):
        produce_deferred(manager, log, "t", data)
    # Broker 3 fetches holding the whole journal (the batch included): told to stand.
    response = _fetch(node, 3)
    assert response.outcome is FetchOutcome.TIMEOUT_NOW and response.epoch == 1
    assert hand_over.outcome() is True
    assert node.state.role is raft.Role.FOLLOWER and node.state.epoch == 1
    assert node.counters.transfers_handed_over == 1
    await_acks()  # committed by the target's fetch: the acknowledgement stands
    assert node.entry_committed(node.journal.end - 1, 1) and result.base_offset == 0


def test_a_silent_target_is_given_up_and_the_leader_serves_on(log):
    clock = Clock()
    node, manager = leader_with_topic(log, clock)
    hand_over = HandOver(node, target=3)
    hand_over.start()
    _until(lambda: node.state.transfer_to == 3, "handing over")
    clock.now_s += node.config.transfer_silence_s  # broker 3 never fetches: it is stopping
    assert hand_over.outcome() is False
    assert node.state.role is raft.Role.LEADER and node.state.transfer_to is None
    assert node.counters.transfers_abandoned == 1
    confirm_lease(node)  # serving again once a majority confirms it, as after any pause
    response = _fetch(node, 3)
    assert response.outcome is FetchOutcome.ENTRIES, "no TIMEOUT_NOW after giving up"


def test_a_follower_or_a_lone_broker_has_nothing_to_hand_over(log):
    clock = Clock()
    follower = cluster_node(2, log, clock)
    assert follower.transfer_leadership(1.0) is False
    assert follower.counters.transfers_abandoned == 0


def test_the_target_stands_on_timeout_now_and_asks_for_transfer_votes(log):
    clock = Clock()
    target = cluster_node(2, log, clock)
    target._absorb_fetch(1, answer(1, 0, leader=1), 0)
    assert target.state.leader_id == 1 and target.state.epoch == 1
    target._absorb_fetch(1, WireFetchResponse(1, 1, 0, FetchOutcome.TIMEOUT_NOW), 0)
    assert target.state.role is raft.Role.CANDIDATE and target.state.epoch == 2
    (votes,) = target._votes_to_send
    assert votes.transfer and not votes.pre_vote and votes.epoch == 2


def test_a_voter_hearing_from_its_leader_grants_only_the_transfer_vote(log):
    clock = Clock()
    voter = cluster_node(3, log, clock)
    voter._absorb_fetch(1, answer(1, 0, leader=1), 0)
    plain = voter.answer_vote(WireVoteRequest(2, 2, 0, 0))
    assert not plain.granted, "its leader spoke just now: the lease refusal holds"
    transfer = voter.answer_vote(WireVoteRequest(2, 2, 0, 0, transfer=True))
    assert transfer.granted and transfer.epoch == 2
    assert voter.state.voted_for == 2


def test_only_the_targets_long_poll_is_woken_by_the_hand_over(log):
    """The others' long-polls wait out their time as before: woken by the hand-over, which
    lasts until the target fetches, they would ask again and again at once."""
    clock = Clock()
    node, _manager = leader_with_topic(log, clock)
    long_poll_ms = 1500
    answered_after_s: dict[int, float] = {}

    def long_poll(follower: int) -> None:
        started = time.monotonic()
        node.answer_fetch(ReplicaFetchRequest(follower, 1, node.journal.end,
                                              node.journal.last_epoch, 1 << 20, long_poll_ms))
        answered_after_s[follower] = time.monotonic() - started

    for follower in (2, 3):  # each has been sent the commit index: nothing new to tell
        node.answer_fetch(ReplicaFetchRequest(follower, 1, node.journal.end,
                                              node.journal.last_epoch, 1 << 20, 0))
    polls = [threading.Thread(target=long_poll, args=(follower,)) for follower in (2, 3)]
    for poll in polls:
        poll.start()
    _until(lambda: len(node._changed._waiters) >= 2, "both long-polls waiting")
    hand_over = HandOver(node, target=3)
    hand_over.start()
    for poll in polls:
        poll.join(WAIT_S)
    assert answered_after_s[3] < long_poll_ms / 1000, "the target's wait ends at the hand-over"
    assert answered_after_s[2] >= 0.9 * long_poll_ms / 1000, "broker 2's wait is not cut short"
    assert _fetch(node, 3).outcome is FetchOutcome.TIMEOUT_NOW
    assert hand_over.outcome() is True
