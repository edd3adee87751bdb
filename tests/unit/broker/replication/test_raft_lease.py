"""The leader lease of the Raft state machine, stepped by hand with an
explicit `now`: when a leader may answer reads and take writes, and why no second leader can
be elected meanwhile. No sockets, no sleeping."""

import pytest

from services.broker.replication.raft import (
    LEASE_FRACTION_MAX,
    AnswerFetch,
    AnswerVote,
    FetchRequest,
    LogChanged,
    Outcome,
    PersistQuorum,
    RaftConfig,
    RaftConfigError,
    Role,
    Tick,
    VoteRequest,
    VoteResponse,
    holds_lease,
    lease_end_s,
)
from tests.unit.broker.replication.test_raft_steps import (
    MIN_S,
    Node,
    _follower_of,
    _leader,
    _log,
)

LEASE_S = 0.8 * MIN_S  # the default: 0.8 of election_timeout_min_s


def _leading_with_noop_committed(at: float = 0.0, **kwargs) -> Node:
    """Broker 1 leads epoch 1 of {1, 2, 3}; broker 2's first fetch (at `at`) holds the NOOP,
    so it is committed -- but that fetch confirms nothing yet (no answer was read before it)."""
    leader = _leader(1, **kwargs)
    leader(FetchRequest(2, 1, 1, 1), at=at)
    assert leader.state.commit == 1
    return leader


def test_a_fetch_alone_gives_no_lease_the_next_one_confirms_the_answer_read():
    leader = _leading_with_noop_committed(at=10.0)
    assert not holds_lease(leader.config, leader.state, 10.0), \
        "broker 2 may not have read the answer yet: its vote refusal may be older"
    # Its next fetch on the same connection: it read the answer made at 10.05.
    leader(FetchRequest(2, 1, 1, 1, confirmed_s=10.05), at=10.3)
    assert lease_end_s(leader.config, leader.state) == pytest.approx(10.05 + LEASE_S)
    assert holds_lease(leader.config, leader.state, 10.3)
    assert holds_lease(leader.config, leader.state, 10.05 + LEASE_S - 0.001)


def test_lease_is_lost_after_a_pause_without_fetches_and_regained_by_confirmed_ones():
    leader = _leading_with_noop_committed(at=10.0)
    leader(FetchRequest(2, 1, 1, 1, confirmed_s=10.0), at=10.2)
    assert holds_lease(leader.config, leader.state, 10.2)
    # The leader is paused (SIGSTOP) for 5 s: nothing stepped, the clock moves on. Asked at
    # once after the thaw, before any tick, it has no lease.
    assert not holds_lease(leader.config, leader.state, 15.2)
    assert leader.state.role is Role.LEADER, "no tick yet: it still thinks it leads"
    # A fetch that confirms an answer made before the pause does not bring it back...
    leader(FetchRequest(2, 1, 1, 1, confirmed_s=10.2), at=15.25)
    assert not holds_lease(leader.config, leader.state, 15.25)
    # ...an unconfirmed one neither; a fresh confirmed one does.
    leader(FetchRequest(3, 1, 1, 1), at=15.3)
    assert not holds_lease(leader.config, leader.state, 15.3)
    leader(FetchRequest(3, 1, 1, 1, confirmed_s=15.3), at=15.5)
    assert holds_lease(leader.config, leader.state, 15.5)
    assert lease_end_s(leader.config, leader.state) == pytest.approx(15.3 + LEASE_S)


def test_a_confirmation_never_moves_the_lease_back():
    leader = _leading_with_noop_committed(at=10.0)
    leader(FetchRequest(2, 1, 1, 1, confirmed_s=10.4), at=10.5)
    leader(FetchRequest(2, 1, 1, 1, confirmed_s=10.1), at=10.6)  # a late, older one
    assert lease_end_s(leader.config, leader.state) == pytest.approx(10.4 + LEASE_S)


def test_five_voters_need_two_confirming_peers_and_the_lease_follows_the_older():
    leader = _leader(1, voters={1, 2, 3, 4, 5})
    leader(FetchRequest(2, 1, 1, 1), at=1.0)
    leader(FetchRequest(3, 1, 1, 1), at=1.0)
    assert leader.state.commit == 1
    leader(FetchRequest(2, 1, 1, 1, confirmed_s=1.5), at=1.6)
    assert not holds_lease(leader.config, leader.state, 1.6), "itself and one peer: 2 of 5"
    leader(FetchRequest(3, 1, 1, 1, confirmed_s=1.2), at=1.7)
    # Broker 1, 2 (heard 1.5) and 3 (heard 1.2): a majority heard from it by 1.2.
    assert lease_end_s(leader.config, leader.state) == pytest.approx(1.2 + LEASE_S)
    leader(FetchRequest(4, 1, 1, 1, confirmed_s=1.6), at=1.8)
    assert lease_end_s(leader.config, leader.state) == pytest.approx(1.5 + LEASE_S)


def test_a_learner_confirming_answers_gives_no_lease_a_voter_does():
    # A learner holds no vote to refuse, so its confirmations prove nothing about who else can
    # be elected: the lease rests on voters only, as the commit and check-quorum counts do.
    leader = _leading_with_noop_committed(at=10.0)
    leader(FetchRequest(3, 1, 1, 1, learner=True), at=10.1)
    leader(FetchRequest(3, 1, 1, 1, learner=True, confirmed_s=10.1), at=10.3)
    assert leader.state.learners == {3} and leader.state.heard_s.get(3) == 10.1
    assert lease_end_s(leader.config, leader.state) == float("-inf")
    assert not holds_lease(leader.config, leader.state, 10.3)
    leader(FetchRequest(2, 1, 1, 1, confirmed_s=10.0), at=10.4)
    assert lease_end_s(leader.config, leader.state) == pytest.approx(10.0 + LEASE_S)


def test_a_new_leader_has_no_lease_until_its_noop_is_committed():
    """Its commit index may be older than its predecessor's until then (Raft thesis §6.4): a
    LIST_OFFSETS would return a stale end."""
    leader = _leader(1, epoch=1, log=_log((1, 4)))  # NOOP of epoch 2 at 4
    leader(FetchRequest(2, 2, 4, 1, confirmed_s=0.0), at=0.1)  # holds only up to the NOOP
    assert leader.state.commit == 0 and dict(leader.state.heard_s) == {2: 0.0}
    assert not holds_lease(leader.config, leader.state, 0.1)
    leader(FetchRequest(2, 2, 5, 2, confirmed_s=0.1), at=0.2)
    assert leader.state.commit == 5 and holds_lease(leader.config, leader.state, 0.2)


def test_followers_candidates_and_deposed_leaders_hold_no_lease():
    follower = _follower_of(leader_id=2, epoch=3, at=10.0)
    assert lease_end_s(follower.config, follower.state) == float("-inf")
    leader = _leading_with_noop_committed(at=10.0)
    leader(FetchRequest(2, 1, 1, 1, confirmed_s=10.0), at=10.1)
    leader(FetchRequest(3, 2, 1, 1), at=10.2)  # broker 3 speaks for epoch 2: deposed
    assert leader.state.role is Role.FOLLOWER
    assert not holds_lease(leader.config, leader.state, 10.2)


def test_a_new_term_starts_with_no_confirmations():
    leader = _leading_with_noop_committed(at=10.0)
    leader(FetchRequest(2, 1, 1, 1, confirmed_s=10.0), at=10.1)
    leader(Tick(), at=20.0)  # check quorum: steps down
    assert leader.state.role is Role.FOLLOWER
    leader.timeout()
    for vote in (True, False):
        leader(VoteResponse(2, 2, True, pre_vote=vote))
    assert leader.state.role is Role.LEADER and dict(leader.state.heard_s) == {}


def test_a_single_voter_holds_the_lease_once_its_noop_is_committed():
    node = Node(1, voters={1}, now=5.0)
    node(Tick(), at=5.0)
    assert node.state.role is Role.LEADER and node.state.commit == 1
    assert holds_lease(node.config, node.state, 1e9)


def test_the_lease_ends_before_any_follower_that_confirmed_would_vote_again():
    """The safety argument, played: broker 2 read the leader's answer made at 10.0 (its
    contact: when it read it, at 10.01); its refusal of votes lasts until 10.01 + MIN_S, the
    leader's lease until 10.0 + LEASE_S, earlier. So while the lease holds, broker 3 cannot
    gather a majority ({2, 3}) for a new epoch."""
    leader = _leading_with_noop_committed(at=9.9)
    follower = _follower_of(leader_id=1, node_id=2, epoch=1, at=10.01)
    leader(FetchRequest(2, 1, 1, 1, confirmed_s=10.0), at=10.2)
    end = lease_end_s(leader.config, leader.state)
    for pre_vote in (True, False):
        actions = follower(VoteRequest(3, 2, 1, 99, pre_vote), at=end)
        assert actions == [AnswerVote(1, False, 1, pre_vote)]
    assert follower(VoteRequest(3, 2, 1, 99, True), at=10.01 + MIN_S)[0].granted


def test_a_follower_of_a_live_leader_keeps_its_epoch_against_a_fetch_from_one_ahead():
    """Broker 3 passed a pre-vote, lost the vote and is one epoch ahead; knowing no leader it
    asks around. Broker 2, whose leader is alive, does not adopt that epoch (it would drop its
    leader and grant votes at once, under the leader's lease); 3 moves on to the leader,
    whose epoch its fetch ends (etcd's rejoin)."""
    follower = _follower_of(leader_id=1, node_id=2, epoch=1, at=10.0)
    before = follower.state
    actions = follower(FetchRequest(3, 2, 0, 0), at=10.5)
    assert actions == [AnswerFetch(Outcome.NOT_LEADER, 1, 1, 0)]
    assert follower.state == before
    # Once the leader has been silent for MIN_S, the newer epoch is adopted as before.
    actions = follower(FetchRequest(3, 2, 0, 0), at=10.0 + MIN_S)
    assert PersistQuorum(2, None) in actions and follower.state.epoch == 2


@pytest.mark.parametrize("lease_timeout_s", [0.0, -0.1, LEASE_FRACTION_MAX * MIN_S + 0.01,
                                             MIN_S, 2 * MIN_S])
def test_a_lease_that_could_outlast_the_vote_refusal_is_a_config_error(lease_timeout_s):
    with pytest.raises(RaftConfigError, match="lease_timeout_s"):
        RaftConfig(1, frozenset({1, 2, 3}), MIN_S, 2 * MIN_S, 2 * MIN_S, lease_timeout_s)


def test_the_lease_defaults_to_a_fraction_of_the_minimum_election_timeout():
    assert RaftConfig(1, frozenset({1, 2, 3}), 0.5, 1.0, 1.0).lease_timeout_s == \
        pytest.approx(0.4)
    assert RaftConfig(1, frozenset({1}), 1.0, 2.0, 2.0, 0.9).lease_timeout_s == 0.9


def test_log_changes_do_not_touch_the_lease():
    leader = _leading_with_noop_committed(at=10.0)
    leader(FetchRequest(2, 1, 1, 1, confirmed_s=10.0), at=10.1)
    before = lease_end_s(leader.config, leader.state)
    leader(LogChanged(leader.state.log.appended(1)), at=10.2)
    assert lease_end_s(leader.config, leader.state) == before
