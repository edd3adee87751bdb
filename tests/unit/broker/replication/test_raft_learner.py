"""Learners and broker incarnations, stepped by hand: a broker whose data
directory is new may have voted in an epoch it forgot and held entries a leader counted, so it
rejoins without a vote until it has caught up; a leader forgets what it knew of a peer that
comes back as another incarnation. No sockets, no sleeping."""

from services.broker.replication.raft import (
    AnswerFetch,
    AnswerVote,
    BecomeVoter,
    CommitAdvanced,
    FetchAnswered,
    FetchRequest,
    LogChanged,
    LogView,
    Outcome,
    PersistQuorum,
    Role,
    SendVotes,
    Tick,
    VoteRequest,
    VoteResponse,
    initial_state,
    unheard_voters,
)
from tests.unit.broker.replication.test_raft_steps import QUORUM_S, Node, _log


class Learner(Node):
    def __init__(self, node_id=3, **kwargs):
        super().__init__(node_id, **kwargs)
        self.state = initial_state(self.config, 0, None, LogView(), 0, self.now, self.rng,
                                   learner=True)


def _leader_of(epoch: int, log: LogView) -> Node:
    """Broker 1, leading `epoch` with `log` (its NOOP last) and broker 2's vote."""
    leader = Node(1, epoch=epoch - 1, log=log)
    leader.timeout()
    leader(VoteResponse(2, epoch, True, None, pre_vote=True))
    leader(VoteResponse(2, epoch, True, None))
    assert leader.state.role is Role.LEADER and leader.state.epoch == epoch
    return leader


def _has(actions, kind) -> bool:
    return any(isinstance(action, kind) for action in actions)


def test_a_learner_grants_no_vote_and_stands_for_nothing():
    learner = Learner()
    for pre_vote in (True, False):
        answer = learner(VoteRequest(1, 5, 4, 10, pre_vote=pre_vote), at=10.0)
        assert [a for a in answer if isinstance(a, AnswerVote)][0].granted is False
    assert learner.state.voted_for is None
    actions = learner.timeout()
    assert not _has(actions, SendVotes) and learner.state.role is Role.FOLLOWER
    assert learner.state.learner


def test_a_wiped_voter_would_vote_twice_in_one_epoch_a_learner_does_not():
    """Broker 3 voted for 1 in epoch 5, then lost its directory. As a voter from scratch (the
    old rule) it grants 2 a vote in that same epoch 5: two leaders of one epoch. As a learner
    it does not."""
    old_rule = Node(3)  # what a wiped broker was before: epoch 0, no vote
    granted = old_rule(VoteRequest(2, 5, 4, 10), at=10.0)
    assert [a for a in granted if isinstance(a, AnswerVote)][0].granted is True
    learner = Learner()
    refused = learner(VoteRequest(2, 5, 4, 10), at=10.0)
    assert [a for a in refused if isinstance(a, AnswerVote)][0].granted is False


def test_a_learner_becomes_a_voter_only_after_hearing_every_voter_and_catching_up():
    learner = Learner()
    # The leader (1, epoch 4, commit 7) answers its first fetch.
    learner(FetchAnswered(1, Outcome.ENTRIES, 4, 1), at=1.0)
    learner(LogChanged(_log((4, 5)), leader_commit=7, matched_end=5))
    assert learner.state.rejoin.catch_up_commit == 7 and learner.state.commit == 5
    assert unheard_voters(learner.config, learner.state) == {2}
    actions = learner(LogChanged(_log((4, 9)), leader_commit=9, matched_end=9))
    assert learner.state.commit == 9 and learner.state.learner, "broker 2 not heard yet"
    assert not _has(actions, BecomeVoter)
    # Broker 2 answers its probe: NOT_LEADER, epoch 4, leader 1.
    actions = learner(FetchAnswered(2, Outcome.NOT_LEADER, 4, 1))
    assert _has(actions, BecomeVoter) and not learner.state.learner
    # It may have voted in epoch 4 before it lost its state: it counts itself voted there.
    assert PersistQuorum(4, 3) in actions and learner.state.voted_for == 3
    vote = learner(VoteRequest(2, 4, 4, 9), at=learner.now + 10)
    assert [a for a in vote if isinstance(a, AnswerVote)][0].granted is False
    vote = learner(VoteRequest(2, 5, 4, 9), at=learner.now + 10)
    assert [a for a in vote if isinstance(a, AnswerVote)][0].granted is True


def test_a_learner_that_heard_every_voter_is_not_promoted_before_its_commit_reaches_the_target():
    """Every voter heard and the leader's epoch reached: only the catch-up commit holds the
    learner back. Its commit (5) is short of the leader's (7), so it may lack entries its lost
    copy helped commit; it becomes a voter once its commit reaches 7 exactly."""
    learner = Learner()
    learner(FetchAnswered(1, Outcome.ENTRIES, 4, 1), at=1.0)
    learner(FetchAnswered(2, Outcome.NOT_LEADER, 4, 1))
    assert unheard_voters(learner.config, learner.state) == set()
    actions = learner(LogChanged(_log((4, 5)), leader_commit=7, matched_end=5))
    assert learner.state.rejoin.catch_up_commit == 7 and learner.state.commit == 5
    assert learner.state.learner and not _has(actions, BecomeVoter), "promoted behind commit 7"
    actions = learner(LogChanged(_log((4, 6)), leader_commit=7, matched_end=6))
    assert learner.state.commit == 6 and learner.state.learner
    assert not _has(actions, BecomeVoter)
    actions = learner(LogChanged(_log((4, 7)), leader_commit=7, matched_end=7))
    assert learner.state.commit == 7 and _has(actions, BecomeVoter)
    assert not learner.state.learner and PersistQuorum(4, 3) in actions


def test_a_learner_waits_for_the_highest_epoch_any_voter_holds():
    """Broker 2 stands at epoch 6 (a candidate the learner may have voted for before it lost
    its state) while the leader is at 4: no vote before its own epoch reaches 6."""
    learner = Learner()
    learner(FetchAnswered(1, Outcome.ENTRIES, 4, 1), at=1.0)
    learner(LogChanged(_log((4, 3)), leader_commit=3, matched_end=3))
    learner(VoteRequest(2, 7, 4, 3, pre_vote=True), at=1.0)  # 2 is at epoch 6
    assert learner.state.learner and learner.state.epoch == 4
    actions = learner(FetchAnswered(2, Outcome.NOT_LEADER, 6, None))  # adopts 6
    assert learner.state.epoch == 6 and not _has(actions, BecomeVoter)
    assert learner.state.learner, "caught up with the leader of 4, not with one of 6"
    # Broker 2 wins epoch 7; its NOOP (index 3) commits and the learner holds it.
    learner(FetchAnswered(2, Outcome.ENTRIES, 7, 2))
    actions = learner(LogChanged(_log((4, 3), (7, 1)), leader_commit=4, matched_end=4))
    assert learner.state.epoch == 7 and _has(actions, BecomeVoter)
    assert learner.state.voted_for == 3


def test_a_learner_does_not_catch_up_to_a_leaders_commit_that_lags_what_was_committed():
    """Soak seed 10269. Leader 1 restarted: it leads epoch 10 with commit 1 although entries up
    to index 2 were committed in epoch 2 (a commit index is not persisted; it learns it again
    once its own NOOP, index 3, commits). A learner caught up to commit 1 lacks index 2, which
    its lost copy may have helped commit: promoted then, it and a voter lacking index 2 could
    elect a leader without it. It waits until the leader's commit covers the NOOP."""
    learner = Learner()
    learner(FetchAnswered(1, Outcome.ENTRIES, 10, 1), at=1.0)
    learner(FetchAnswered(2, Outcome.NOT_LEADER, 10, 1))
    log = _log((2, 3), (10, 1))  # the learner now holds everything the leader has
    actions = learner(LogChanged(log, leader_commit=1, matched_end=4))
    assert learner.state.commit == 1 and learner.state.learner
    assert not _has(actions, BecomeVoter), "promoted on a commit index that lags"
    actions = learner(LogChanged(log, leader_commit=4, matched_end=4))
    assert learner.state.commit == 4 and _has(actions, BecomeVoter)
    assert PersistQuorum(10, 3) in actions


def test_a_cluster_being_formed_has_no_history_so_its_brokers_become_voters():
    learner = Learner()
    learner(FetchAnswered(1, Outcome.NOT_LEADER, 0, None), at=0.1)
    assert learner.state.learner
    actions = learner(FetchAnswered(2, Outcome.NOT_LEADER, 0, None))
    assert _has(actions, BecomeVoter) and learner.state.voted_for is None
    assert _has(learner.timeout(), SendVotes), "a voter stands for election again"


def test_a_learner_in_a_cluster_with_history_waits_for_a_leader():
    learner = Learner()
    learner(FetchAnswered(1, Outcome.NOT_LEADER, 3, None), at=0.1)
    learner(FetchAnswered(2, Outcome.NOT_LEADER, 3, None))
    assert learner.state.learner, "heard everyone, but nobody told it a commit index yet"


def test_the_leader_does_not_count_a_learner_for_commit_or_for_check_quorum():
    leader = _leader_of(2, _log((1, 4)))
    noop_end = leader.state.log.end
    start = leader.now
    actions = leader(FetchRequest(3, 2, noop_end, 2, incarnation=9, learner=True),
                     at=start + 0.5)
    assert not _has(actions, CommitAdvanced), "a learner's match made a majority"
    assert leader.state.commit == 0
    # Broker 2 is silent; the learner fetches on, right until the quorum timeout.
    leader(FetchRequest(3, 2, noop_end, 2, incarnation=9, learner=True), at=start + QUORUM_S)
    leader(Tick(), at=start + QUORUM_S + 0.1)
    assert leader.state.role is Role.FOLLOWER, "a learner's fetches kept a leader in office"


def test_a_promoted_learner_counts_again():
    leader = _leader_of(2, _log((1, 4)))
    end = leader.state.log.end
    leader(FetchRequest(3, 2, end, 2, incarnation=9, learner=True), at=0.5)
    actions = leader(FetchRequest(3, 2, end, 2, incarnation=9, learner=False), at=0.6)
    assert CommitAdvanced(end) in actions


def test_a_changed_incarnation_resets_the_match_even_on_a_diverging_fetch():
    """Broker 2's directory is replaced by another one (say, a copy of an older broker's):
    its first fetch diverges, so nothing sets its match -- the old rule kept the match of the
    journal it no longer has, and counted it toward commit. Its new incarnation resets it."""
    leader = _leader_of(3, _log((1, 4)))
    end = leader.state.log.end
    leader(FetchRequest(2, 3, end, 3, incarnation=7), at=0.5)
    assert leader.state.match[2] == end
    answer = leader(FetchRequest(2, 3, 3, 2, incarnation=8), at=0.6)  # epoch 2: not ours
    assert [a for a in answer if isinstance(a, AnswerFetch)][0].outcome is Outcome.DIVERGING
    assert leader.state.match[2] == 0
    actions = leader(LogChanged(leader.state.log), at=0.7)
    assert not _has(actions, CommitAdvanced)


def test_a_leader_whose_peers_all_fetch_as_learners_commits_nothing_and_survives():
    """Soak seed 40046 (transfers amid wiped directories): a leader held a stale learner flag
    for a broker promoted since, and the other broker was a learner: no voter but itself to
    count, and the commit count indexed past its list (the loop thread would have died)."""
    from tests.unit.broker.replication.test_raft_steps import _leader

    leader = _leader(1)
    leader(FetchRequest(2, 1, 1, 1, learner=True), at=1.0)
    actions = leader(FetchRequest(3, 1, 1, 1, learner=True), at=1.1)
    assert leader.state.learners == {2, 3}
    assert leader.state.commit == 0 and not [a for a in actions if isinstance(a, CommitAdvanced)]


def test_learner_flags_are_learned_afresh_in_every_term():
    """A flag noted while leading an earlier term may be stale (that broker was promoted since
    and has not fetched from this one): a new term starts with none."""
    node = Node(1)
    node.timeout()
    node(VoteResponse(2, 1, True, pre_vote=True))
    node(VoteResponse(2, 1, True))
    node(FetchRequest(3, 1, 0, 0, learner=True), at=0.5)
    assert node.state.learners == {3}
    node(FetchRequest(2, 2, 1, 1), at=0.6)  # deposed: broker 2 speaks for epoch 2
    assert node.state.role is Role.FOLLOWER
    node.timeout()
    node(VoteResponse(2, 3, True, pre_vote=True))
    node(VoteResponse(2, 3, True))
    assert node.state.role is Role.LEADER and node.state.learners == frozenset()


def test_a_wiped_broker_named_leader_of_its_old_epoch_does_not_follow_itself():
    """Broker 3 led epoch 11 before its directory was wiped; a peer that has not heard of a
    successor still names it: the new incarnation adopts the epoch, not itself as its leader
    (a follower fetching from itself: the real nemesis found the loop thread dying of it)."""
    learner = Learner(node_id=3)
    actions = learner(FetchAnswered(1, Outcome.NOT_LEADER, 11, 3), at=1.0)
    assert PersistQuorum(11, None) in actions, "the scenario: a newer epoch, adopted"
    assert learner.state.epoch == 11 and learner.state.role is Role.FOLLOWER
    assert learner.state.leader_id is None, "never its own follower"


def test_a_learner_told_to_stand_by_its_leader_does_not():
    # A leader never hands over to a learner; a learner refuses a TIMEOUT_NOW all the same,
    # as it refuses to stand on an election timeout.
    learner = Learner()
    learner(FetchAnswered(1, Outcome.ENTRIES, 2, 1), at=1.0)
    assert learner.state.learner and (learner.state.epoch, learner.state.leader_id) == (2, 1)
    actions = learner(FetchAnswered(1, Outcome.TIMEOUT_NOW, 2, 1), at=1.1)
    assert not _has(actions, SendVotes) and not _has(actions, PersistQuorum)
    assert learner.state.role is Role.FOLLOWER and learner.state.epoch == 2
