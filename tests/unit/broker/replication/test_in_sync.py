"""In-sync replicas (replication/in_sync.py) of a leader stepped by hand through the Raft state
machine, with an explicit `now`: who caught up when, who falls out after the lag bound and who
comes back. No sockets, no sleeping."""

from dataclasses import replace

import pytest

from services.broker.replication.in_sync import (
    REPLICA_LAG_TIME_MAX_S,
    in_sync_replicas,
    runs_without_healthy_majority,
)
from services.broker.replication.raft import FetchRequest, LogChanged, RaftConfig, Role
from tests.unit.broker.replication.test_raft_steps import Node, _follower_of, _leader

LAG_S = REPLICA_LAG_TIME_MAX_S


def _isr(node: Node, at: float) -> frozenset[int] | None:
    return in_sync_replicas(node.config, node.state, at)


def _grow(leader: Node, entries: int, at: float) -> None:
    """Writers append `entries` entries of the leader's epoch at `at`."""
    leader(LogChanged(leader.state.log.appended(leader.state.epoch, entries)), at=at)


def _both_caught_up(at: float) -> Node:
    """Broker 1 leads epoch 1 of {1, 2, 3}: its NOOP and 9 entries (end 10), both followers
    fetched from that end at `at`."""
    leader = _leader(1)
    _grow(leader, 9, at - 1.0)
    for follower in (2, 3):
        leader(FetchRequest(follower, 1, 10, 1), at=at)
    assert _isr(leader, at) == {1, 2, 3}
    return leader


def test_a_new_leader_counts_only_itself_until_a_follower_fetches_from_its_end():
    leader = _leader(1)
    start_s = leader.now
    assert _isr(leader, start_s) == {1}, "a new leader knows nothing of anyone's journal"
    leader(FetchRequest(2, 1, 0, 0), at=start_s + 0.1)  # before the NOOP: behind
    assert _isr(leader, start_s + 0.1) == {1}
    leader(FetchRequest(2, 1, 1, 1), at=start_s + 0.2)  # the whole journal (the NOOP)
    assert _isr(leader, start_s + 0.2) == {1, 2}


def test_a_follower_stuck_behind_the_leader_leaves_after_the_lag_bound():
    leader = _both_caught_up(at=10.0)
    _grow(leader, 4, at=10.1)  # end 14
    # Broker 3 fetches again and again from 10 (it cannot take entry 10), broker 2 keeps up.
    now = 10.2
    while now < 10.0 + LAG_S + 2.0:
        leader(FetchRequest(3, 1, 10, 1), at=now)
        leader(FetchRequest(2, 1, 14, 1), at=now)
        now += 0.2
    assert leader.state.match[3] == 10 and leader.state.last_fetch_s[3] > 10.0 + LAG_S, \
        "the scenario: broker 3 keeps fetching, from behind"
    assert _isr(leader, 10.0 + LAG_S) == {1, 2, 3}, "caught up at 10.0: in for the bound"
    assert _isr(leader, 10.0 + LAG_S + 0.01) == {1, 2}
    # It gets past the entry and fetches from the leader's end: in sync again at once.
    leader(FetchRequest(3, 1, 14, 1), at=now)
    assert _isr(leader, now) == {1, 2, 3}


def test_a_follower_that_stops_fetching_leaves_and_returns_on_its_next_fetch():
    leader = _both_caught_up(at=10.0)
    for now in (10.2, 12.0, 14.0, 16.0):
        leader(FetchRequest(2, 1, 10, 1), at=now)  # broker 3 is dead
    assert _isr(leader, 15.0) == {1, 2, 3}
    assert _isr(leader, 16.0) == {1, 2}
    _grow(leader, 5, at=17.0)  # end 15: written while 3 was away
    leader(FetchRequest(3, 1, 10, 1), at=20.0)  # restarted: behind
    assert _isr(leader, 20.0) == {1, 2}
    leader(FetchRequest(3, 1, 15, 1), at=20.1)  # the answer brought it to the end
    assert _isr(leader, 20.1) == {1, 2, 3}


def test_a_follower_always_one_fetch_behind_busy_writers_stays_in_sync():
    """Writers append between every two fetches: the follower is never at the leader's end
    when it asks, but always at the end the leader had when it asked before."""
    leader = _both_caught_up(at=10.0)
    now = 10.0
    for _ in range(300):  # 60 s
        _grow(leader, 3, at=now + 0.1)
        previous_end = leader.state.end_at_fetch[2]
        now += 0.2
        leader(FetchRequest(2, 1, previous_end, 1), at=now)
        leader(FetchRequest(3, 1, leader.state.end_at_fetch[3], 1), at=now)
        assert leader.state.match[2] < leader.state.log.end, "the scenario: always behind"
    assert now > 10.0 + 10 * LAG_S
    assert _isr(leader, now) == {1, 2, 3}


def test_a_follower_outpaced_by_the_writers_leaves_and_returns_once_it_catches_up():
    leader = _both_caught_up(at=10.0)
    now, held = 10.0, 10
    for _ in range(40):  # 8 s: each answer carries 2 entries, the writers add 5
        _grow(leader, 5, at=now + 0.1)
        now += 0.2
        held += 2
        leader(FetchRequest(2, 1, leader.state.log.end, 1), at=now)
        leader(FetchRequest(3, 1, held, 1), at=now)
    assert held < leader.state.end_at_fetch[2] - 100, "the scenario: 3 falls further behind"
    assert _isr(leader, now) == {1, 2}
    leader(FetchRequest(3, 1, leader.state.log.end, 1), at=now + 0.2)
    assert _isr(leader, now + 0.2) == {1, 2, 3}


def test_a_diverging_fetch_earns_nothing():
    leader = _both_caught_up(at=10.0)
    # Broker 3 says it holds 12 entries ending in epoch 1: the leader has only 10.
    leader(FetchRequest(3, 1, 12, 1), at=11.0)
    leader(FetchRequest(3, 1, 12, 1), at=12.0)
    assert leader.state.caught_up_s[3] == 10.0
    assert _isr(leader, 10.0 + LAG_S + 0.1) == {1}


def test_learners_are_never_in_sync():
    leader = _both_caught_up(at=10.0)
    leader(FetchRequest(3, 1, 10, 1, learner=True), at=10.2)
    assert leader.state.learners == {3}
    assert _isr(leader, 10.2) == {1, 2}


def test_a_follower_back_as_another_incarnation_caught_up_never():
    leader = _both_caught_up(at=10.0)
    leader(FetchRequest(3, 1, 10, 1, incarnation=5), at=10.2)
    assert _isr(leader, 10.2) == {1, 2, 3}
    leader(FetchRequest(3, 1, 0, 0, incarnation=6), at=10.4)  # a wiped directory
    assert 3 not in leader.state.caught_up_s
    assert _isr(leader, 10.4) == {1, 2}


def test_only_the_leader_knows():
    follower = _follower_of(leader_id=2, node_id=1)
    assert in_sync_replicas(follower.config, follower.state, 0.0) is None
    leader = _both_caught_up(at=10.0)
    deposed = replace(leader.state, role=Role.FOLLOWER, leader_id=None)
    assert in_sync_replicas(leader.config, deposed, 10.0) is None


def test_a_single_voter_is_its_own_in_sync_set():
    alone = _leader(1, voters={1})
    assert _isr(alone, alone.now + 100.0) == {1}


@pytest.mark.parametrize(("voters", "in_sync", "without"), [
    ({1, 2, 3}, {1, 2, 3}, False),
    ({1, 2, 3}, {1, 2}, False),  # under-replicated, but a majority holds everything
    ({1, 2, 3}, {1}, True),
    ({1, 2, 3, 4, 5}, {1, 2, 3}, False),
    ({1, 2, 3, 4, 5}, {1, 2}, True),
])
def test_a_healthy_majority_is_a_majority_of_voters_in_sync(voters, in_sync, without):
    config = RaftConfig(1, frozenset(voters))
    assert runs_without_healthy_majority(config, frozenset(in_sync)) is without
