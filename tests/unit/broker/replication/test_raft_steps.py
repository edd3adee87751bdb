"""The Raft state machine, stepped event by event with explicit `now` and a seeded rng: no
sockets, no sleeping. Each test reads as a short story of one or two brokers."""

import random

import pytest

from services.broker.replication import journal
from services.broker.replication.raft import (
    NO_EPOCH,
    AnswerFetch,
    AnswerVote,
    AppendNoop,
    ApplyEntries,
    CommitAdvanced,
    FetchAnswered,
    FetchRequest,
    InstallSnapshot,
    LogChanged,
    LogView,
    Outcome,
    PersistQuorum,
    RaftConfig,
    RaftConfigError,
    RaftState,
    Role,
    RoleChanged,
    SendVotes,
    StaleDivergence,
    Tick,
    Truncate,
    VoteRequest,
    VoteResponse,
    fetch_target,
    initial_state,
    step,
)

MIN_S = 1.0
MAX_S = 2.0
QUORUM_S = 2.0
VOTERS = frozenset({1, 2, 3})
EMPTY = LogView()


def _config(node_id=1, voters=VOTERS, **overrides) -> RaftConfig:
    settings = dict(election_timeout_min_s=MIN_S, election_timeout_max_s=MAX_S,
                    quorum_timeout_s=QUORUM_S)
    settings.update(overrides)
    return RaftConfig(node_id, frozenset(voters), **settings)


def _log(*runs: tuple[int, int]) -> LogView:
    """A journal from (epoch, count) runs: _log((1, 2), (3, 4)) is 2 entries of epoch 1 then 4
    of epoch 3."""
    view = LogView()
    for epoch, count in runs:
        view = view.appended(epoch, count)
    return view


class Node:
    """One state machine with its config, rng and a clock that only moves when told."""

    def __init__(self, node_id=1, voters=VOTERS, epoch=0, voted_for=None, log=EMPTY,
                 commit=0, now=0.0, seed=0, **overrides):
        self.config = _config(node_id, voters, **overrides)
        self.rng = random.Random(seed)
        self.now = now
        self.state = initial_state(self.config, epoch, voted_for, log, commit, now, self.rng)

    def __call__(self, event, at: float | None = None) -> list:
        if at is not None:
            self.now = at
        self.state, actions = step(self.config, self.state, event, self.now, self.rng)
        return actions

    def timeout(self) -> list:
        """Tick right at the election deadline."""
        return self(Tick(), at=self.state.election_deadline_s)


def _leader(node_id=1, epoch=0, log=EMPTY, voters=VOTERS, now=0.0, **kwargs) -> Node:
    """A node that wins epoch + 1 through a pre-vote and a vote from its lowest peers."""
    node = Node(node_id, voters, epoch=epoch, log=log, now=now, **kwargs)
    node.timeout()
    electors = sorted(node.config.peers)[:node.config.majority - 1]
    for peer in electors:
        node(VoteResponse(peer, epoch + 1, True, pre_vote=True))
    for peer in electors:
        node(VoteResponse(peer, epoch + 1, True))
    assert node.state.role is Role.LEADER and node.state.epoch == epoch + 1
    return node


def _follower_of(leader_id=2, node_id=1, epoch=1, log=EMPTY, at=0.0) -> Node:
    """A node that has just heard from `leader_id` (an answered fetch) at `at`."""
    node = Node(node_id, epoch=epoch, voted_for=leader_id, log=log, now=at)
    actions = node(FetchAnswered(leader_id, Outcome.ENTRIES, epoch, leader_id))
    assert ApplyEntries() in actions and node.state.leader_id == leader_id
    return node


def _of(actions, kind) -> list:
    return [action for action in actions if isinstance(action, kind)]


def _answer(actions, kind=AnswerVote):
    (answer,) = _of(actions, kind)
    return answer


# --- a cluster of one ----------------------------------------------------------------------


def test_single_voter_elects_itself_at_once_and_commits_its_noop():
    node = Node(1, voters={1}, now=5.0)
    assert node.state.election_deadline_s == 5.0, "nothing to wait for"
    actions = node(Tick(), at=5.0)
    assert actions == [PersistQuorum(1, 1), AppendNoop(1), CommitAdvanced(1),
                       RoleChanged(Role.LEADER, 1, 1)]
    state = node.state
    assert (state.role, state.epoch, state.voted_for, state.leader_id) == (Role.LEADER, 1, 1, 1)
    assert state.log == LogView(1, ((1, 0),)) and state.commit == 1 and state.epoch_start == 0
    assert not _of(actions, SendVotes), "no one to ask"


def test_single_voter_commits_each_append_and_never_steps_down():
    node = Node(1, voters={1})
    node(Tick())
    actions = node(LogChanged(node.state.log.appended(1, 3)), at=100.0)
    assert actions == [CommitAdvanced(4)]
    assert node(Tick(), at=1000.0) == [] and node.state.role is Role.LEADER


# --- elections: pre-vote, vote, leader -----------------------------------------------------


def test_election_timeout_runs_a_pre_vote_then_a_vote_then_leads():
    node = Node(1, log=_log((1, 2)), epoch=1, now=10.0, seed=7)
    deadline = node.state.election_deadline_s
    assert 10.0 + MIN_S <= deadline <= 10.0 + MAX_S
    assert node(Tick(), at=deadline - 0.001) == []

    actions = node(Tick(), at=deadline)
    assert actions == [SendVotes(2, 1, 2, frozenset({2, 3}), pre_vote=True)]
    state = node.state
    assert state.pre_voting and state.role is Role.FOLLOWER
    assert state.epoch == 1 and state.voted_for is None, "a pre-vote changes no epoch"
    assert not _of(actions, PersistQuorum)
    assert deadline + MIN_S <= state.election_deadline_s <= deadline + MAX_S

    actions = node(VoteResponse(2, 2, True, pre_vote=True), at=deadline + 0.1)
    assert actions == [PersistQuorum(2, 1), SendVotes(2, 1, 2, frozenset({2, 3})),
                       RoleChanged(Role.CANDIDATE, 2, None)], "persisted before asking"
    assert (node.state.epoch, node.state.voted_for, node.state.role) == (2, 1, Role.CANDIDATE)

    actions = node(VoteResponse(3, 2, True), at=deadline + 0.2)
    assert actions == [AppendNoop(2), RoleChanged(Role.LEADER, 2, 1)]
    state = node.state
    assert state.log == _log((1, 2), (2, 1)) and state.epoch_start == 2
    assert state.commit == 0, "nobody holds the NOOP yet"
    assert dict(state.match) == {2: 0, 3: 0}
    assert fetch_target(state) is None, "a leader does not fetch"


def test_a_refused_or_foreign_pre_vote_does_not_count():
    node = Node(1, epoch=3)
    node.timeout()
    assert node(VoteResponse(2, 3, False, pre_vote=True)) == []
    assert node(VoteResponse(2, 3, True, pre_vote=True)) == [], "granted for another epoch"
    assert node.state.pre_voting and node.state.epoch == 3
    assert _of(node(VoteResponse(3, 4, True, pre_vote=True)), SendVotes)


def test_a_refused_pre_vote_from_a_newer_epoch_is_adopted():
    node = Node(1, epoch=3)
    node.timeout()
    actions = node(VoteResponse(2, 7, False, leader_id=3, pre_vote=True))
    assert actions == [PersistQuorum(7, None), RoleChanged(Role.FOLLOWER, 7, 3)]
    assert not node.state.pre_voting and fetch_target(node.state) == 3


def test_adopting_a_newer_epoch_sets_a_fresh_election_deadline_from_now():
    # A vote request of a newer epoch from a less complete journal: refused, but its epoch is
    # adopted, and the broker waits a whole election timeout from now before standing itself.
    node = Node(1, epoch=1, log=_log((1, 3)), now=100.0)
    actions = node(VoteRequest(2, 5, 0, 0))
    assert PersistQuorum(5, None) in actions and _answer(actions).granted is False
    assert node.state.epoch == 5 and node.state.role is Role.FOLLOWER
    assert 100.0 + MIN_S <= node.state.election_deadline_s <= 100.0 + MAX_S


def test_candidate_whose_election_times_out_goes_back_to_a_pre_vote():
    node = Node(1, epoch=3)
    node.timeout()
    node(VoteResponse(2, 4, True, pre_vote=True))
    assert node.state.role is Role.CANDIDATE
    actions = node.timeout()
    assert actions == [SendVotes(5, 0, 0, frozenset({2, 3}), pre_vote=True),
                       RoleChanged(Role.FOLLOWER, 4, None)]
    assert node.state.epoch == 4, "no new epoch without a majority of pre-votes"


def test_votes_for_an_old_epoch_or_from_a_follower_are_ignored():
    node = Node(1, epoch=3)
    node.timeout()
    node(VoteResponse(2, 4, True, pre_vote=True))
    assert node(VoteResponse(2, 3, True)) == []
    assert node(VoteResponse(2, 4, False)) == []
    assert node.state.role is Role.CANDIDATE and node.state.votes == {1}


def test_five_voters_need_three_votes_and_a_repeated_vote_counts_once():
    node = Node(1, voters={1, 2, 3, 4, 5})
    node.timeout()
    node(VoteResponse(2, 1, True, pre_vote=True))
    assert node.state.pre_voting
    node(VoteResponse(3, 1, True, pre_vote=True))
    assert node.state.role is Role.CANDIDATE
    node(VoteResponse(2, 1, True))
    node(VoteResponse(2, 1, True))
    assert node.state.role is Role.CANDIDATE
    assert _of(node(VoteResponse(4, 1, True)), AppendNoop)


def test_vote_refused_to_a_less_complete_journal():
    own = _log((1, 3), (2, 2))  # last epoch 2, end 5
    for last_epoch, end, granted in [(2, 4, False),  # same epoch, shorter
                                     (1, 9, False),  # longer but older last epoch
                                     (2, 5, True),  # equal
                                     (3, 1, True)]:  # newer last epoch, however short
        for pre_vote in (True, False):
            node = Node(1, epoch=2, log=own)
            actions = node(VoteRequest(2, 3, last_epoch, end, pre_vote))
            assert _answer(actions).granted is granted, (last_epoch, end, pre_vote)


def test_one_vote_per_epoch():
    node = Node(1, epoch=1)
    actions = node(VoteRequest(2, 2, 0, 0))
    assert actions == [PersistQuorum(2, None), PersistQuorum(2, 2), AnswerVote(2, True, None),
                       RoleChanged(Role.FOLLOWER, 2, None)]
    assert node(VoteRequest(3, 2, 0, 0)) == [AnswerVote(2, False, None)], "already voted"
    assert node(VoteRequest(2, 2, 0, 0)) == [AnswerVote(2, True, None)], "same one: again"
    assert node.state.voted_for == 2


def test_a_vote_is_persisted_before_it_is_answered():
    for epoch in (1, 2):  # a newer epoch, and the current one with no vote yet
        node = Node(1, epoch=1)
        actions = node(VoteRequest(3, epoch, 0, 0))
        persisted = [i for i, a in enumerate(actions) if a == PersistQuorum(epoch, 3)]
        answered = [i for i, a in enumerate(actions) if isinstance(a, AnswerVote)]
        assert persisted and answered and persisted[0] < answered[0], actions
        assert _answer(actions).granted


def test_a_vote_for_an_old_epoch_is_refused_with_the_current_one():
    node = _follower_of(leader_id=2, epoch=5)
    assert node(VoteRequest(3, 4, 9, 99)) == [AnswerVote(5, False, 2)]


def test_a_pre_vote_changes_nothing():
    node = Node(1, epoch=1, voted_for=2)
    before = node.state
    actions = node(VoteRequest(3, 2, 0, 0, pre_vote=True), at=50.0)
    assert actions == [AnswerVote(2, True, None, pre_vote=True)]
    assert node.state == before


def test_a_pre_vote_for_no_newer_epoch_is_refused():
    node = Node(1, epoch=4)
    assert node(VoteRequest(3, 4, 9, 9, pre_vote=True)) == [
        AnswerVote(4, False, None, pre_vote=True)]


def test_candidate_and_leader_of_the_epoch_refuse_other_candidates():
    node = Node(1, epoch=1)
    node.timeout()
    node(VoteResponse(2, 2, True, pre_vote=True))
    assert node(VoteRequest(3, 2, 5, 5)) == [AnswerVote(2, False, None)]
    node(VoteResponse(2, 2, True))
    assert node(VoteRequest(3, 2, 5, 5)) == [AnswerVote(2, False, 1)]


# --- leader stickiness ---------------------------------------------------------------------


def test_follower_that_heard_from_its_leader_refuses_pre_votes_and_votes_of_newer_epochs():
    node = _follower_of(leader_id=2, epoch=3, at=10.0)
    before = node.state
    for pre_vote in (True, False):
        actions = node(VoteRequest(3, 4, 9, 99, pre_vote), at=10.0 + MIN_S - 0.01)
        assert actions == [AnswerVote(3, False, 2, pre_vote)]
        assert node.state == before, "no epoch adopted, no vote cast"
    # Once the leader has been silent for election_timeout_min_s, it may go.
    assert _answer(node(VoteRequest(3, 4, 9, 99, pre_vote=True), at=10.0 + MIN_S)).granted
    actions = node(VoteRequest(3, 4, 9, 99), at=10.0 + MIN_S)
    assert actions[:3] == [PersistQuorum(4, None), PersistQuorum(4, 3), AnswerVote(4, True, None)]


def test_leader_refuses_pre_votes_and_votes_of_newer_epochs():
    node = _leader(1)
    before = node.state
    assert node(VoteRequest(3, 2, 9, 99, pre_vote=True), at=100.0) == [
        AnswerVote(1, False, 1, pre_vote=True)]
    assert node(VoteRequest(3, 2, 9, 99), at=100.0) == [AnswerVote(1, False, 1)]
    assert node.state == before


def test_a_leader_hint_alone_is_no_contact_with_the_leader():
    node = Node(1, epoch=3)
    node(FetchAnswered(2, Outcome.NOT_LEADER, 3, leader_id=3))
    assert node.state.leader_id == 3
    assert _answer(node(VoteRequest(2, 4, 0, 0, pre_vote=True))).granted


# --- replication at the leader -------------------------------------------------------------


def test_fetch_at_the_leader_is_answered_with_entries_and_moves_match():
    leader = _leader(1, epoch=1, log=_log((1, 4)))  # NOOP of epoch 2 at 4
    actions = leader(FetchRequest(2, 2, 4, 1), at=0.5)
    assert actions == [AnswerFetch(Outcome.ENTRIES, 2, 1, 0, 4)]
    assert dict(leader.state.match)[2] == 4 and leader.state.last_fetch_s[2] == 0.5
    assert leader.state.commit == 0, "4 is not past the NOOP at 4"
    actions = leader(FetchRequest(2, 2, 0, 0), at=0.6)
    assert actions == [AnswerFetch(Outcome.ENTRIES, 2, 1, 0, 0)]
    assert dict(leader.state.match)[2] == 0, "match follows a follower down (a wiped disk)"


def test_figure_8_older_entries_held_by_a_majority_commit_only_with_the_new_noop():
    # Leader of epoch 3 over entries of epochs 1 and 2 that it never committed.
    leader = _leader(1, epoch=2, log=_log((1, 2), (2, 2)))
    assert leader.state.epoch_start == 4 and leader.state.log.end == 5
    actions = leader(FetchRequest(2, 3, 4, 2))
    assert not _of(actions, CommitAdvanced) and leader.state.commit == 0
    assert _answer(actions, AnswerFetch).commit == 0, "epoch 2's entries are not committed"
    actions = leader(FetchRequest(3, 3, 4, 2))
    assert leader.state.commit == 0, "a majority holds 0..3: still nothing of epoch 3"
    actions = leader(FetchRequest(2, 3, 5, 3))
    assert actions == [CommitAdvanced(5), AnswerFetch(Outcome.ENTRIES, 3, 1, 5, 5)]
    assert leader.state.commit == 5, "the NOOP on a majority commits everything below it"


def test_leader_commit_needs_a_majority_and_never_goes_back():
    leader = _leader(1, voters={1, 2, 3, 4, 5})
    leader(LogChanged(leader.state.log.appended(1, 4)))  # end 5
    assert leader(FetchRequest(2, 1, 5, 1)) == [AnswerFetch(Outcome.ENTRIES, 1, 1, 0, 5)]
    actions = leader(FetchRequest(3, 1, 3, 1))
    assert actions == [CommitAdvanced(3), AnswerFetch(Outcome.ENTRIES, 1, 1, 3, 3)]
    actions = leader(FetchRequest(3, 1, 5, 1))
    assert actions[0] == CommitAdvanced(5)
    leader(FetchRequest(2, 1, 0, 0))
    leader(FetchRequest(3, 1, 0, 0))
    assert leader.state.commit == 5, "commit never goes back"
    actions = leader(LogChanged(leader.state.log.appended(1, 2)))
    assert actions == [] and leader.state.log.end == 7


def test_leader_answers_diverging_with_the_end_of_the_epoch():
    leader = _leader(1, epoch=2, log=_log((1, 4)))  # epochs 1: 0..3, 3: 4 (NOOP)
    # A follower whose last entries are of epoch 2, which the leader never had.
    actions = leader(FetchRequest(2, 3, 6, 2))
    assert actions == [AnswerFetch(Outcome.DIVERGING, 3, 1, 0, 6, 1, 4)]
    assert dict(leader.state.match)[2] == 0, "no match from a diverging fetch"
    assert leader.state.last_fetch_s[2] == leader.now, "but it is alive"
    # A follower with more entries of epoch 1 than the leader.
    assert _answer(leader(FetchRequest(3, 3, 6, 1)), AnswerFetch).diverging_end == 4
    # A follower whose oldest epoch the leader does not know at all.
    leader = _leader(1, epoch=4, log=_log((3, 2)))
    assert leader(FetchRequest(2, 5, 3, 2)) == [
        AnswerFetch(Outcome.DIVERGING, 5, 1, 0, 3, NO_EPOCH, 0)]


def _compacted(view: LogView, start: int) -> LogView:
    """The same journal with its entries below `start` folded into a snapshot."""
    return LogView(view.end, view.epochs, start)


def test_leader_answers_snapshot_below_its_compacted_prefix():
    """Entries below the snapshot are gone; a follower that needs them is answered
    SNAPSHOT, still checked for divergence first (the epoch cache keeps compacted epochs) and
    counted in match like any fetch."""
    leader = _leader(1, epoch=2, log=_log((1, 4), (2, 2)))  # NOOP of epoch 3 at 6
    leader(LogChanged(_compacted(leader.state.log, 5)))
    assert leader(FetchRequest(2, 3, 3, 1)) == [AnswerFetch(Outcome.SNAPSHOT, 3, 1, 0, 3)]
    assert dict(leader.state.match)[2] == 3
    assert leader(FetchRequest(3, 3, 0, 0)) == [AnswerFetch(Outcome.SNAPSHOT, 3, 1, 0, 0)], \
        "an empty follower (a wiped disk) installs the snapshot too"
    assert leader(FetchRequest(2, 3, 3, 0)) == [
        AnswerFetch(Outcome.DIVERGING, 3, 1, 0, 3, NO_EPOCH, 0)], "entries of an epoch unknown"
    assert leader(FetchRequest(2, 3, 5, 1)) == [
        AnswerFetch(Outcome.DIVERGING, 3, 1, 0, 5, 1, 4)], "more of epoch 1 than the leader had"
    assert leader(FetchRequest(2, 3, 5, 2)) == [AnswerFetch(Outcome.ENTRIES, 3, 1, 0, 5)], \
        "from the snapshot's end on, entries"


def test_follower_installs_a_snapshot_and_commits_up_to_its_end():
    node = Node(1, epoch=2, log=_log((1, 2)))
    actions = node(FetchAnswered(2, Outcome.SNAPSHOT, 2, leader_id=2), at=3.0)
    assert actions == [InstallSnapshot(), RoleChanged(Role.FOLLOWER, 2, 2)]
    installed = LogView(9, ((1, 0), (2, 7)), 9)
    assert node(LogChanged(installed, leader_commit=12, matched_end=9)) == [CommitAdvanced(9)]
    assert node.state.log == installed and node.state.log.last_epoch == 2


def test_a_restart_counts_the_snapshot_committed_whatever_the_commit_store_says():
    node = Node(1, epoch=2, log=LogView(12, ((1, 0), (2, 7)), 10), commit=3)
    assert node.state.commit == 10
    assert node.state.log.truncated(4) == LogView(10, ((1, 0), (2, 7)), 10), \
        "never below the snapshot"


def test_check_quorum_leader_steps_down_without_fetches_from_a_majority():
    leader = _leader(1)
    won = leader.now
    assert leader(Tick(), at=won + QUORUM_S) == [], "the grace period after winning"
    leader(FetchRequest(2, 1, 1, 1), at=won + 1.5)
    assert leader(Tick(), at=won + 1.5 + QUORUM_S) == [], "2 fetched: with itself a majority"
    actions = leader(Tick(), at=won + 1.5 + QUORUM_S + 0.01)
    assert actions == [RoleChanged(Role.FOLLOWER, 1, None)]
    state = leader.state
    assert state.role is Role.FOLLOWER and state.epoch == 1 and state.leader_id is None
    assert state.election_deadline_s > leader.now
    # Stepped down, it answers fetches of its epoch NOT_LEADER, naming nobody.
    assert leader(FetchRequest(2, 1, 1, 1)) == [AnswerFetch(Outcome.NOT_LEADER, 1, None, 1)]
    # It runs no pre-vote round yet: grants it never asked for start no election.
    assert leader(VoteResponse(2, 2, True, pre_vote=True)) == []
    assert leader(VoteResponse(3, 2, True, pre_vote=True)) == []
    assert leader.state.role is Role.FOLLOWER and leader.state.epoch == 1


def test_check_quorum_in_five_counts_distinct_recent_followers():
    leader = _leader(1, voters={1, 2, 3, 4, 5})
    won = leader.now
    leader(FetchRequest(2, 1, 0, 0), at=won + 1.0)
    leader(FetchRequest(2, 1, 0, 0), at=won + 1.9)
    assert leader(Tick(), at=won + 1.95) == [], "the others are still in the grace period"
    leader(FetchRequest(3, 1, 0, 0), at=won + 2.0)
    assert leader(Tick(), at=won + 2.5) == [], "2 and 3 recently: with itself, 3 of 5"
    actions = leader(Tick(), at=won + 1.9 + QUORUM_S + 0.01)
    assert actions == [RoleChanged(Role.FOLLOWER, 1, None)], "only 3 is recent: 2 of 5"


def test_stale_epoch_fetch_is_answered_not_leader_with_epoch_and_leader():
    leader = _leader(1, epoch=4)
    before = leader.state
    assert leader(FetchRequest(2, 3, 9, 3)) == [AnswerFetch(Outcome.NOT_LEADER, 5, 1, 0)]
    assert leader.state == before
    follower = _follower_of(leader_id=1, node_id=3, epoch=5)
    assert follower(FetchRequest(2, 4, 0, 0)) == [AnswerFetch(Outcome.NOT_LEADER, 5, 1, 0)]


def test_higher_epoch_fetch_request_deposes_the_leader():
    leader = _leader(1)
    actions = leader(FetchRequest(2, 7, 0, 0))
    assert actions == [PersistQuorum(7, None), AnswerFetch(Outcome.NOT_LEADER, 7, None, 0),
                       RoleChanged(Role.FOLLOWER, 7, None)]


def test_higher_epoch_vote_response_deposes_the_leader():
    leader = _leader(1)
    actions = leader(VoteResponse(3, 4, False, leader_id=2))
    assert actions == [PersistQuorum(4, None), RoleChanged(Role.FOLLOWER, 4, 2)]


def test_higher_epoch_fetch_answer_deposes_the_leader_and_is_applied():
    leader = _leader(1)
    actions = leader(FetchAnswered(2, Outcome.ENTRIES, 3, leader_id=2))
    assert actions == [PersistQuorum(3, None), ApplyEntries(), RoleChanged(Role.FOLLOWER, 3, 2)]


def test_leader_ignores_answers_of_its_own_epoch():
    leader = _leader(1)
    before = leader.state
    for outcome in Outcome:
        assert leader(FetchAnswered(2, outcome, 1, leader_id=3)) == []
    assert leader.state == before


# --- replication at the follower -----------------------------------------------------------


def test_follower_applies_entries_and_takes_the_commit_up_to_its_own_end():
    node = Node(1, epoch=2, log=_log((1, 3)))
    actions = node(FetchAnswered(2, Outcome.ENTRIES, 2, leader_id=2), at=3.0)
    assert actions == [ApplyEntries(), RoleChanged(Role.FOLLOWER, 2, 2)]
    assert node.state.last_leader_contact_s == 3.0 and fetch_target(node.state) == 2
    assert node(LogChanged(node.state.log, leader_commit=9, matched_end=3)) == [
        CommitAdvanced(3)]
    assert node(LogChanged(node.state.log.appended(2, 4), leader_commit=5, matched_end=7)) == [
        CommitAdvanced(5)]
    assert node(LogChanged(node.state.log, leader_commit=2, matched_end=7)) == [], \
        "never goes back"
    assert node(LogChanged(node.state.log.truncated(6))) == [] and node.state.commit == 5


def test_follower_commit_counts_only_entries_that_match_the_leader():
    """A journal tail the leader did not vouch for (a deposed leader's entry its
    state machine learnt of late) is never counted committed, whatever the leader's commit."""
    node = Node(1, epoch=2, log=_log((1, 2)))
    node(FetchAnswered(2, Outcome.ENTRIES, 2, leader_id=2), at=3.0)
    # The journal holds 3 entries (the last one unvalidated); the fetch was from end 2.
    assert node(LogChanged(_log((1, 3)), leader_commit=9, matched_end=2)) == [
        CommitAdvanced(2)]
    assert node.state.commit == 2


def test_divergence_below_the_commit_is_reported_not_dropped():
    node = Node(1, epoch=2, log=_log((1, 4)))
    node(FetchAnswered(2, Outcome.ENTRIES, 2, leader_id=2), at=3.0)
    node(LogChanged(node.state.log, leader_commit=4, matched_end=4))
    actions = node(FetchAnswered(2, Outcome.DIVERGING, 2, 2, diverging_epoch=1,
                                 diverging_end=2), at=3.1)
    assert actions == [StaleDivergence(2, 4, 2)]
    assert node.state.log.end == 4 and node.state.commit == 4


def test_follower_truncates_to_the_smaller_end_of_the_diverging_epoch():
    # Own: epoch 1 at 0..2, epoch 2 at 3..5. The leader says: epoch 1 ends at 4 with me.
    node = Node(1, epoch=3, log=_log((1, 3), (2, 3)))
    actions = node(FetchAnswered(2, Outcome.DIVERGING, 3, 2, diverging_epoch=1,
                                 diverging_end=4))
    assert actions == [Truncate(3), RoleChanged(Role.FOLLOWER, 3, 2)], "own epoch 1 ends at 3"
    # Own: epoch 1 at 0..5; the leader's epoch 1 ends at 4.
    node = Node(1, epoch=3, log=_log((1, 6)))
    assert _of(node(FetchAnswered(2, Outcome.DIVERGING, 3, 2, 1, 4)), Truncate) == [
        Truncate(4)]
    # The leader has no epoch as old as ours: everything goes.
    node = Node(1, epoch=3, log=_log((2, 6)))
    assert _of(node(FetchAnswered(2, Outcome.DIVERGING, 3, 2, NO_EPOCH, 0)), Truncate) == [
        Truncate(0)]
    # The leader's epoch 2 is one we never had: our last epoch below it (1) ends at 2.
    node = Node(1, epoch=4, log=_log((1, 2), (3, 3)))
    assert _of(node(FetchAnswered(2, Outcome.DIVERGING, 4, 2, 2, 7)), Truncate) == [
        Truncate(2)]


def test_follower_ignores_answers_of_older_epochs_and_failures():
    node = _follower_of(leader_id=2, epoch=5)
    before = node.state
    for outcome in Outcome:
        assert node(FetchAnswered(3, outcome, 4, leader_id=3)) == []
    assert node(FetchAnswered(2, Outcome.FAILED)) == []
    assert node.state == before


def test_candidate_of_the_epoch_follows_its_leader_s_answer():
    node = Node(1, epoch=1)
    node.timeout()
    node(VoteResponse(2, 2, True, pre_vote=True))
    assert node.state.role is Role.CANDIDATE
    actions = node(FetchAnswered(3, Outcome.ENTRIES, 2, leader_id=3))
    assert actions == [ApplyEntries(), RoleChanged(Role.FOLLOWER, 2, 3)]
    assert node.state.voted_for == 1, "its own vote stays"


def test_leader_hint_makes_a_leaderless_follower_follow():
    node = Node(1, epoch=2)
    assert fetch_target(node.state) is None, "nobody known: ask around"
    actions = node(FetchAnswered(3, Outcome.NOT_LEADER, 2, leader_id=2))
    assert actions == [RoleChanged(Role.FOLLOWER, 2, 2)] and fetch_target(node.state) == 2
    # A newer epoch is adopted with its leader.
    actions = node(FetchAnswered(3, Outcome.NOT_LEADER, 4, leader_id=3))
    assert actions == [PersistQuorum(4, None), RoleChanged(Role.FOLLOWER, 4, 3)]
    # An older epoch, or no leader named, or ourselves, changes nothing.
    node = Node(1, epoch=2)
    assert node(FetchAnswered(3, Outcome.NOT_LEADER, 1, leader_id=2)) == []
    assert node(FetchAnswered(3, Outcome.NOT_LEADER, 2, leader_id=None)) == []
    assert node(FetchAnswered(3, Outcome.NOT_LEADER, 2, leader_id=1)) == []
    assert node.state.leader_id is None


def test_leader_hint_does_not_replace_a_known_leader_of_the_epoch():
    node = _follower_of(leader_id=2, epoch=3)
    assert node(FetchAnswered(3, Outcome.NOT_LEADER, 3, leader_id=3)) == []
    assert node.state.leader_id == 2


def test_leader_hint_ends_a_candidacy_in_the_same_epoch():
    node = Node(1, epoch=1)
    node.timeout()
    node(VoteResponse(2, 2, True, pre_vote=True))
    actions = node(FetchAnswered(2, Outcome.NOT_LEADER, 2, leader_id=3))
    assert actions == [RoleChanged(Role.FOLLOWER, 2, 3)] and not node.state.votes


def test_restart_keeps_epoch_and_vote_and_clips_commit_to_the_journal():
    config = _config(1)
    state = initial_state(config, 6, 3, _log((2, 4)), 9, 100.0, random.Random(1))
    assert (state.role, state.epoch, state.voted_for, state.leader_id) == (
        Role.FOLLOWER, 6, 3, None)
    assert state.commit == 4
    assert 100.0 + MIN_S <= state.election_deadline_s <= 100.0 + MAX_S
    assert isinstance(state, RaftState)


# --- LogView -------------------------------------------------------------------------------


def test_log_view_of_an_empty_journal():
    view = LogView()
    assert (view.end, view.last_epoch, view.epochs) == (0, 0, ())
    assert view.end_of_epoch(0) == (NO_EPOCH, 0)
    assert view.end_of_epoch(99) == (NO_EPOCH, 0)
    assert view.truncated(5) == view and view.truncated(-1) == view


def test_log_view_end_of_epoch():
    view = _log((2, 3), (4, 2), (7, 1))  # 2: 0..2, 4: 3..4, 7: 5
    assert view.epochs == ((2, 0), (4, 3), (7, 5)) and view.end == 6
    assert view.end_of_epoch(1) == (NO_EPOCH, 0), "older than anything here"
    assert view.end_of_epoch(2) == (2, 3)
    assert view.end_of_epoch(3) == (2, 3), "a gap: the epoch below"
    assert view.end_of_epoch(4) == (4, 5)
    assert view.end_of_epoch(6) == (4, 5)
    assert view.end_of_epoch(7) == (7, 6)
    assert view.end_of_epoch(100) == (7, 6)


def test_log_view_appended():
    view = LogView().appended(3)
    assert view == LogView(1, ((3, 0),))
    assert view.appended(3, 4) == LogView(5, ((3, 0),)), "same epoch: no new start"
    assert view.appended(5, 2) == LogView(3, ((3, 0), (5, 1)))
    assert LogView().appended(0) == LogView(1, ((0, 0),))
    with pytest.raises(AssertionError):
        view.appended(2)
    with pytest.raises(AssertionError):
        view.appended(3, 0)


def test_log_view_truncated():
    view = _log((2, 3), (4, 2), (7, 1))
    assert view.truncated(6) == view and view.truncated(60) == view
    assert view.truncated(5) == LogView(5, ((2, 0), (4, 3))), "an epoch's start is cut: it goes"
    assert view.truncated(4) == LogView(4, ((2, 0), (4, 3)))
    assert view.truncated(3) == LogView(3, ((2, 0),))
    assert view.truncated(1) == LogView(1, ((2, 0),))
    assert view.truncated(0) == LogView() and view.truncated(-3) == LogView()
    assert view.truncated(3).last_epoch == 2


# --- configuration -------------------------------------------------------------------------


@pytest.mark.parametrize("node_id, voters, settings", [
    (4, {1, 2, 3}, {}),
    (1, set(), {}),
    (1, {1}, {"election_timeout_min_s": 0.0}),
    (1, {1}, {"election_timeout_min_s": -1.0, "election_timeout_max_s": 1.0}),
    (1, {1}, {"election_timeout_min_s": 2.0, "election_timeout_max_s": 1.0}),
    (1, {1}, {"election_timeout_min_s": 2.0, "election_timeout_max_s": 3.0,
              "quorum_timeout_s": 1.5}),
])
def test_config_validation(node_id, voters, settings):
    with pytest.raises(RaftConfigError):
        RaftConfig(node_id, frozenset(voters), **settings)
    assert issubclass(RaftConfigError, ValueError)


def test_config_majority_and_peers():
    assert RaftConfig(1, frozenset({1})).majority == 1
    assert RaftConfig(1, frozenset({1, 2})).majority == 2
    config = RaftConfig(2, frozenset({1, 2, 3, 4, 5}), 0.5, 0.5, 0.5)
    assert config.majority == 3 and config.peers == {1, 3, 4, 5}


def test_no_epoch_is_the_journals_no_epoch():
    # The leader's DIVERGING answer compares the journal's end_of_epoch with raft's view.
    assert NO_EPOCH == journal.NO_EPOCH == -1
