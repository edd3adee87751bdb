"""Leadership transfer in the Raft state machine (Raft thesis §3.10), stepped by hand
with an explicit `now`: a leader told to hand over gives up its lease, answers the chosen
voter's caught-up fetch TIMEOUT_NOW and steps down; that voter stands at once, and voters grant
its `transfer` vote even while they still hear from the old leader. No sockets, no sleeping."""

from services.broker.replication.raft import (
    AbandonTransfer,
    AnswerFetch,
    AnswerVote,
    FetchAnswered,
    FetchRequest,
    LogChanged,
    Outcome,
    PersistQuorum,
    Role,
    SendVotes,
    Tick,
    TransferLeadership,
    VoteRequest,
    VoteResponse,
    holds_lease,
)
from tests.unit.broker.replication.test_raft_steps import (
    _answer,
    _follower_of,
    _leader,
    _log,
    _of,
)


def _leading_with_lease(at: float = 10.0):
    """Broker 1 leads epoch 1 of {1, 2, 3} with its NOOP committed and its lease held:
    broker 2 holds the NOOP, broker 3 is one entry behind after a produce."""
    leader = _leader(1)
    leader(FetchRequest(2, 1, 1, 1), at=at)
    leader(FetchRequest(2, 1, 1, 1, confirmed_s=at), at=at + 0.1)
    leader(FetchRequest(3, 1, 0, 0), at=at + 0.1)
    leader(LogChanged(_log((1, 2))), at=at + 0.1)  # a produce appended entry 1
    assert holds_lease(leader.config, leader.state, at + 0.1)
    return leader


def test_the_leader_gives_up_its_lease_at_once_and_picks_the_most_caught_up_voter():
    leader = _leading_with_lease()
    leader(FetchRequest(3, 1, 2, 1, confirmed_s=10.1), at=10.2)  # 3 holds both entries
    actions = leader(TransferLeadership(deadline_s=15.0), at=10.3)
    assert actions == []
    assert leader.state.transfer_to == 3, "broker 3's match (2) is longer than 2's (1)"
    assert leader.state.role is Role.LEADER, "it still replicates until the target caught up"
    assert not holds_lease(leader.config, leader.state, 10.3), \
        "no reads, no writes from the moment it starts handing over"


def test_a_behind_target_gets_entries_and_its_caught_up_fetch_gets_timeout_now():
    leader = _leading_with_lease()
    leader(TransferLeadership(target=2, deadline_s=15.0), at=10.3)
    actions = leader(FetchRequest(2, 1, 1, 1), at=10.35)  # one entry behind
    assert _answer(actions, AnswerFetch).outcome is Outcome.ENTRIES
    assert leader.state.role is Role.LEADER
    actions = leader(FetchRequest(2, 1, 2, 1), at=10.4)  # holds the whole journal now
    answer = _answer(actions, AnswerFetch)
    assert answer.outcome is Outcome.TIMEOUT_NOW and answer.epoch == 1
    assert leader.state.commit == 2, "the target's fetch counted toward the commit first"
    assert leader.state.role is Role.FOLLOWER and leader.state.leader_id is None
    assert leader.state.transfer_to is None
    assert not holds_lease(leader.config, leader.state, 10.4)


def test_another_followers_fetch_gets_entries_not_timeout_now():
    leader = _leading_with_lease()
    leader(TransferLeadership(target=2, deadline_s=15.0), at=10.3)
    actions = leader(FetchRequest(3, 1, 2, 1), at=10.35)
    assert _answer(actions, AnswerFetch).outcome is Outcome.ENTRIES
    assert leader.state.role is Role.LEADER and leader.state.transfer_to == 2


def test_an_unreached_target_is_abandoned_at_the_deadline_and_the_leader_serves_on():
    leader = _leading_with_lease()
    leader(TransferLeadership(target=2, deadline_s=10.5), at=10.3)
    leader(FetchRequest(3, 1, 2, 1), at=10.4)
    leader(FetchRequest(2, 1, 1, 1, confirmed_s=10.4), at=10.45)  # behind: entries
    leader(Tick(), at=10.49)
    assert leader.state.transfer_to == 2
    leader(Tick(), at=10.5)
    assert leader.state.transfer_to is None and leader.state.role is Role.LEADER
    # No TIMEOUT_NOW went out, so no transfer vote can exist: its lease counts again.
    assert holds_lease(leader.config, leader.state, 10.5)


def test_a_hand_over_given_up_before_its_deadline_serves_on():
    leader = _leading_with_lease()
    leader(TransferLeadership(target=2, deadline_s=15.0), at=10.3)
    assert leader(AbandonTransfer(), at=10.4) == []
    assert leader.state.transfer_to is None and leader.state.role is Role.LEADER
    assert _answer(leader(FetchRequest(2, 1, 2, 1), at=10.45), AnswerFetch).outcome \
        is Outcome.ENTRIES, "the target's caught-up fetch gets entries again"


def test_no_transfer_to_a_learner_a_stranger_or_from_a_follower():
    leader = _leading_with_lease()
    leader(FetchRequest(3, 1, 2, 1, learner=True), at=10.2)
    leader(TransferLeadership(target=3), at=10.3)
    assert leader.state.transfer_to is None, "a learner cannot stand"
    leader(TransferLeadership(target=7), at=10.3)
    assert leader.state.transfer_to is None
    leader(TransferLeadership(), at=10.3)
    assert leader.state.transfer_to == 2, "the only voter left"
    follower = _follower_of(leader_id=2, node_id=1)
    assert follower(TransferLeadership()) == [] and follower.state.transfer_to is None


def test_the_target_stands_at_once_and_asks_for_transfer_votes():
    target = _follower_of(leader_id=1, node_id=2, epoch=1, log=_log((1, 2)), at=10.0)
    actions = target(FetchAnswered(1, Outcome.TIMEOUT_NOW, 1, 1), at=10.1)
    assert target.state.role is Role.CANDIDATE and target.state.epoch == 2
    assert PersistQuorum(2, 2) in actions
    (votes,) = _of(actions, SendVotes)
    assert votes.transfer and not votes.pre_vote and votes.epoch == 2
    assert (votes.last_epoch, votes.end) == (1, 2)


def test_a_stale_or_foreign_timeout_now_is_ignored():
    target = _follower_of(leader_id=1, node_id=2, epoch=3, at=10.0)
    assert target(FetchAnswered(1, Outcome.TIMEOUT_NOW, 2, 1), at=10.1) == []
    assert target.state.role is Role.FOLLOWER and target.state.epoch == 3
    # From a broker that is not its leader of this epoch: no.
    assert target(FetchAnswered(3, Outcome.TIMEOUT_NOW, 3, 3), at=10.2) == []
    assert target.state.role is Role.FOLLOWER


def test_a_voter_that_hears_from_the_leader_grants_a_transfer_vote_and_refuses_others():
    voter = _follower_of(leader_id=1, node_id=3, epoch=1, log=_log((1, 2)), at=10.0)
    actions = voter(VoteRequest(2, 2, 1, 2), at=10.1)
    assert not _answer(actions).granted, "a plain vote: its leader is alive (lease refusal)"
    actions = voter(VoteRequest(2, 2, 1, 2, transfer=True), at=10.1)
    answer = _answer(actions)
    assert answer.granted and answer.epoch == 2
    assert PersistQuorum(2, 2) in actions


def test_a_transfer_vote_still_needs_a_journal_at_least_as_complete():
    voter = _follower_of(leader_id=1, node_id=3, epoch=1, log=_log((1, 3)), at=10.0)
    actions = voter(VoteRequest(2, 2, 1, 2, transfer=True), at=10.1)
    assert not _answer(actions, AnswerVote).granted


def test_the_whole_hand_over_elects_the_target_in_the_next_epoch():
    leader = _leading_with_lease()
    target = _follower_of(leader_id=1, node_id=2, epoch=1, log=_log((1, 2)), at=10.2)
    other = _follower_of(leader_id=1, node_id=3, epoch=1, log=_log((1, 2)), at=10.2)
    leader(FetchRequest(3, 1, 2, 1, confirmed_s=10.2), at=10.25)
    leader(TransferLeadership(target=2, deadline_s=15.0), at=10.3)
    answer = _answer(leader(FetchRequest(2, 1, 2, 1), at=10.31), AnswerFetch)
    assert answer.outcome is Outcome.TIMEOUT_NOW
    (votes,) = _of(target(FetchAnswered(1, answer.outcome, answer.epoch, 1), at=10.32),
                   SendVotes)
    request = VoteRequest(2, votes.epoch, votes.last_epoch, votes.end, transfer=votes.transfer)
    granted = _answer(other(request, at=10.33))
    also = _answer(leader(request, at=10.33))
    assert granted.granted and also.granted, "the old leader stepped down: it grants too"
    target(VoteResponse(3, granted.epoch, True), at=10.34)
    assert target.state.role is Role.LEADER and target.state.epoch == 2
    # The old leader, one epoch behind, follows the new one on its first answer.
    assert leader.state.role is Role.FOLLOWER and leader.state.epoch == 2
