"""Bully election, stepped event by event with explicit `now`: no sockets, no sleeping."""

import pytest

from healthchecker.bully import (
    BecameFollower,
    BecameLeader,
    ElectionConfig,
    Kind,
    LeaderLost,
    Message,
    PeerDown,
    Received,
    Role,
    Send,
    Start,
    Tick,
    initial_state,
    next_timer_at,
    step,
)
from tests.unit.healthchecker.election_sim import CONFIG_DEFAULTS, Cluster, lose_between

INTERVAL_S = CONFIG_DEFAULTS["healthcheck_interval_s"]
MISSES = CONFIG_DEFAULTS["healthcheck_misses_max"]
ANSWER_TIMEOUT_S = CONFIG_DEFAULTS["answer_timeout_s"]
COORDINATOR_TIMEOUT_S = CONFIG_DEFAULTS["coordinator_timeout_s"]


def _node(node_id, peers, **overrides):
    settings = {**CONFIG_DEFAULTS, **overrides}
    return initial_state(ElectionConfig(node_id, frozenset(peers), **settings))


def _sends(actions, kind=None):
    return [(a.to, a.message.kind) for a in actions if isinstance(a, Send)
            and (kind is None or a.message.kind is kind)]


def _converged(ids=(1, 2, 3)) -> Cluster:
    cluster = Cluster.of(ids)
    for node in ids:
        cluster.start(node)
    cluster.run(3.0)
    assert cluster.leaders() == {max(ids)}
    return cluster


# --- single steps ------------------------------------------------------------------------------


def test_highest_node_is_leader_at_once_and_announces_to_all():
    state, actions = step(_node(3, {1, 2}), Start(), now=10.0)
    assert state.role is Role.LEADER and state.leader_id == 3
    assert actions[0] == BecameLeader()
    assert sorted(_sends(actions)) == [(1, Kind.COORDINATOR), (2, Kind.COORDINATOR)]


def test_lower_node_asks_higher_ones_and_wins_only_after_the_answer_timeout():
    state, actions = step(_node(1, {2, 3}), Start(), now=0.0)
    assert state.role is Role.ELECTING
    assert sorted(_sends(actions)) == [(2, Kind.ELECTION), (3, Kind.ELECTION)]
    state, actions = step(state, Tick(), now=ANSWER_TIMEOUT_S - 0.01)
    assert state.role is Role.ELECTING and actions == []
    state, actions = step(state, Tick(), now=ANSWER_TIMEOUT_S)
    assert state.role is Role.LEADER and BecameLeader() in actions


def test_answer_then_no_coordinator_restarts_the_election():
    state, _ = step(_node(1, {2, 3}), Start(), now=0.0)
    state, _ = step(state, Received(Message(Kind.ANSWER, 3)), now=0.1)
    assert state.role is Role.AWAITING_COORDINATOR
    state, actions = step(state, Tick(), now=0.1 + ANSWER_TIMEOUT_S)  # answer timeout is moot now
    assert state.role is Role.AWAITING_COORDINATOR and actions == []
    state, actions = step(state, Tick(), now=0.1 + COORDINATOR_TIMEOUT_S)
    assert state.role is Role.ELECTING
    assert sorted(_sends(actions)) == [(2, Kind.ELECTION), (3, Kind.ELECTION)]


def test_election_from_lower_is_answered_and_triggers_own_election():
    state, _ = step(_node(2, {1, 3}), Received(Message(Kind.COORDINATOR, 3)), now=0.0)
    assert state.role is Role.IDLE, "a node that has not started ignores the network"
    state, _ = step(_node(2, {1, 3}), Start(), now=0.0)
    state, _ = step(state, Received(Message(Kind.COORDINATOR, 3)), now=0.1)
    assert state.role is Role.FOLLOWER
    state, actions = step(state, Received(Message(Kind.ELECTION, 1)), now=0.2)
    assert (1, Kind.ANSWER) in _sends(actions) and (3, Kind.ELECTION) in _sends(actions)
    assert LeaderLost(previous=3) in actions and state.role is Role.ELECTING


def test_leader_answers_election_by_reasserting_itself():
    state, _ = step(_node(3, {1, 2}), Start(), now=0.0)
    state, actions = step(state, Received(Message(Kind.ELECTION, 1)), now=0.5)
    assert state.role is Role.LEADER
    assert (1, Kind.ANSWER) in _sends(actions)
    assert sorted(_sends(actions, Kind.COORDINATOR)) == [
        (1, Kind.COORDINATOR),
        (2, Kind.COORDINATOR),
    ]
    assert BecameLeader() not in actions, "no second notification for an unchanged leader"


def test_lower_coordinator_is_bullied():
    leader, _ = step(_node(3, {1, 2}), Start(), now=0.0)
    leader, actions = step(leader, Received(Message(Kind.COORDINATOR, 2)), now=0.1)
    assert leader.role is Role.LEADER and _sends(actions, Kind.COORDINATOR)
    follower, _ = step(_node(2, {1, 3}), Start(), now=0.0)
    follower, _ = step(follower, Received(Message(Kind.COORDINATOR, 3)), now=0.0)
    follower, actions = step(follower, Received(Message(Kind.COORDINATOR, 1)), now=0.1)
    assert follower.role is Role.ELECTING and (3, Kind.ELECTION) in _sends(actions)


def test_messages_from_self_or_strangers_are_ignored():
    state, _ = step(_node(2, {1, 3}), Start(), now=0.0)
    for sender in (2, 99):
        new_state, actions = step(state, Received(Message(Kind.COORDINATOR, sender)), now=0.1)
        assert (new_state, actions) == (state, [])


def test_follower_pings_leader_each_interval_and_elects_after_misses():
    state, _ = step(_node(1, {2}), Start(), now=0.0)
    state, actions = step(state, Received(Message(Kind.COORDINATOR, 2)), now=0.0)
    assert actions == [BecameFollower(2)]
    pings = 0
    now = 0.0
    while state.role is Role.FOLLOWER:
        now = round(now + 0.05, 2)
        state, actions = step(state, Tick(), now)
        pings += len(_sends(actions, Kind.HEALTHCHECK))
        assert now <= MISSES * INTERVAL_S, "a silent leader must be given up in time"
    assert now == pytest.approx(MISSES * INTERVAL_S)
    assert pings == MISSES, "the leader got exactly `misses_max` unanswered pings"
    assert state.role is Role.ELECTING and LeaderLost(previous=2) in actions


def test_healthcheck_replies_keep_the_leader_and_a_denial_starts_an_election():
    state, _ = step(_node(1, {2, 3}), Start(), now=0.0)
    state, _ = step(state, Received(Message(Kind.COORDINATOR, 3)), now=0.0)
    now = 0.0
    for _ in range(20):
        now += INTERVAL_S
        state, _ = step(state, Tick(), now)
        state, _ = step(state, Received(Message(Kind.HEALTHCHECK_REPLY, 3, leader=3)), now)
    assert state.role is Role.FOLLOWER and state.leader_id == 3
    state, actions = step(state, Received(Message(Kind.HEALTHCHECK_REPLY, 3, leader=None)), now)
    assert state.role is Role.ELECTING and LeaderLost(previous=3) in actions


def test_healthcheck_is_answered_with_the_replier_s_leader():
    state, _ = step(_node(2, {1, 3}), Start(), now=0.0)
    _, actions = step(state, Received(Message(Kind.HEALTHCHECK, 1)), now=0.1)
    assert actions == [Send(1, Message(Kind.HEALTHCHECK_REPLY, 2, leader=None))]


def test_next_timer_at_follows_the_role():
    assert next_timer_at(_node(1, {2})) is None
    electing, _ = step(_node(1, {2}), Start(), now=5.0)
    assert next_timer_at(electing) == pytest.approx(5.0 + ANSWER_TIMEOUT_S)
    follower, _ = step(electing, Received(Message(Kind.COORDINATOR, 2)), now=5.1)
    assert next_timer_at(follower) == pytest.approx(5.1)  # first ping right away
    follower, _ = step(follower, Tick(), now=5.1)
    assert next_timer_at(follower) == pytest.approx(5.1 + INTERVAL_S)
    leader, _ = step(_node(2, {1}), Start(), now=1.0)
    assert next_timer_at(leader) == pytest.approx(1.0 + CONFIG_DEFAULTS["announce_interval_s"])


def test_only_the_leader_says_it_is_the_leader():
    leader, _ = step(_node(3, {1, 2}), Start(), now=0.0)
    electing, _ = step(_node(1, {2, 3}), Start(), now=0.0)
    follower, _ = step(electing, Received(Message(Kind.COORDINATOR, 3)), now=0.1)
    assert leader.is_leader is True
    assert electing.is_leader is False and follower.is_leader is False


def test_every_election_a_node_starts_is_counted_for_the_metrics():
    leader, _ = step(_node(3, {1, 2}), Start(), now=0.0)
    assert leader.elections_started == 1, "leader at once is still one election"
    state, _ = step(_node(1, {2, 3}), Start(), now=0.0)
    assert state.elections_started == 1
    state, _ = step(state, Received(Message(Kind.ANSWER, 3)), now=0.1)
    state, _ = step(state, Tick(), now=0.1 + COORDINATOR_TIMEOUT_S)  # no COORDINATOR came
    assert state.role is Role.ELECTING and state.elections_started == 2
    state, _ = step(state, Received(Message(Kind.COORDINATOR, 3)), now=1.0)
    state, _ = step(state, PeerDown(3), now=1.1)
    assert state.role is Role.ELECTING and state.elections_started == 3


def test_a_higher_coordinator_moves_a_follower_to_the_new_leader():
    state, _ = step(_node(1, {2, 3}), Start(), now=0.0)
    state, _ = step(state, Received(Message(Kind.COORDINATOR, 2)), now=0.1)
    state, _ = step(state, Tick(), now=0.2)
    state, actions = step(state, Received(Message(Kind.COORDINATOR, 3)), now=0.3)
    assert actions == [BecameFollower(3)] and state.leader_id == 3
    _, actions = step(state, Tick(), now=0.3)
    assert actions == [Send(3, Message(Kind.HEALTHCHECK, 1))], "the new leader is pinged at once"


def test_the_leader_s_periodic_announcement_keeps_a_follower_quietly():
    state, _ = step(_node(1, {3}), Start(), now=0.0)
    state, _ = step(state, Received(Message(Kind.COORDINATOR, 3)), now=0.0)
    state, _ = step(state, Tick(), now=0.0)
    state, actions = step(state, Received(Message(Kind.COORDINATOR, 3)), now=0.3)
    assert actions == [] and state.leader_id == 3
    assert next_timer_at(state) == pytest.approx(INTERVAL_S), "the ping schedule is unchanged"


def test_the_leader_reannounces_itself_each_announce_interval():
    announce_s = CONFIG_DEFAULTS["announce_interval_s"]
    state, _ = step(_node(2, {1}), Start(), now=0.0)
    state, actions = step(state, Tick(), now=announce_s / 2)
    assert actions == []
    state, actions = step(state, Tick(), now=announce_s)
    assert actions == [Send(1, Message(Kind.COORDINATOR, 2))]
    assert next_timer_at(state) == pytest.approx(2 * announce_s)


def test_an_answer_counts_only_for_an_electing_node_and_only_from_a_higher_id():
    follower, _ = step(_node(2, {1, 3}), Start(), now=0.0)
    follower, _ = step(follower, Received(Message(Kind.COORDINATOR, 3)), now=0.1)
    electing, _ = step(_node(2, {1, 3}), Start(), now=0.0)
    for state, sender in ((follower, 3), (electing, 1)):  # a late answer; a lower node's
        new_state, actions = step(state, Received(Message(Kind.ANSWER, sender)), now=0.2)
        assert (new_state, actions) == (state, [])


def test_a_healthcheck_reply_from_a_former_leader_is_ignored():
    state, _ = step(_node(1, {2, 3}), Start(), now=0.0)
    state, _ = step(state, Received(Message(Kind.COORDINATOR, 2)), now=0.0)
    state, _ = step(state, Received(Message(Kind.COORDINATOR, 3)), now=0.1)
    for named in (2, 3, None):  # 2's answer to a ping sent while it led, whatever it says now
        late_reply = Message(Kind.HEALTHCHECK_REPLY, 2, leader=named)
        new_state, actions = step(state, Received(late_reply), now=0.2)
        assert (new_state, actions) == (state, []), f"a reply naming {named} from a non-leader"


def test_node_ids_start_at_0():
    cluster = _converged((0, 1))
    assert cluster.known_leaders() == {0: 1, 1: 1}


# --- scenarios on a simulated network ------------------------------------------------------


def test_simultaneous_start_elects_the_highest_once():
    cluster = _converged((1, 2, 3))
    assert cluster.known_leaders() == {1: 3, 2: 3, 3: 3}
    assert [n for _, n, a in cluster.notifications if isinstance(a, BecameLeader)] == [3]


def test_simultaneous_elections_with_highest_dead():
    cluster = Cluster.of((1, 2, 3))
    cluster.alive.update({1, 2})
    cluster.apply(1, Start())
    cluster.apply(2, Start())
    cluster.deliver_all()
    assert cluster.role(1) is Role.AWAITING_COORDINATOR  # 2 answered it
    assert cluster.role(2) is Role.ELECTING  # waiting for 3, which is dead
    cluster.run(ANSWER_TIMEOUT_S + 0.1)
    assert cluster.leaders() == {2} and cluster.known_leaders() == {1: 2, 2: 2}
    assert [n for _, n, a in cluster.notifications if isinstance(a, BecameLeader)] == [2]


def test_killed_leader_is_replaced_within_misses_times_interval_plus_answer_timeout():
    cluster = _converged((1, 2, 3))
    cluster.crash(3)
    killed_at = cluster.now
    while cluster.leaders() != {2}:
        cluster.run(0.05)
        assert cluster.now - killed_at <= MISSES * INTERVAL_S + ANSWER_TIMEOUT_S + 0.1
    cluster.run(0.2)
    assert cluster.known_leaders() == {1: 2, 2: 2}


def test_leader_that_comes_back_takes_over_again():
    cluster = _converged((1, 2, 3))
    cluster.crash(3)
    cluster.run(MISSES * INTERVAL_S + ANSWER_TIMEOUT_S + 0.5)
    assert cluster.leaders() == {2}
    cluster.start(3)
    assert cluster.role(3) is Role.LEADER
    cluster.deliver_all()
    assert cluster.known_leaders() == {1: 3, 2: 3, 3: 3}
    assert (cluster.now, 2, BecameFollower(3)) in cluster.notifications


def test_lost_coordinator_is_recovered_by_the_periodic_announcement():
    cluster = Cluster.of((1, 2, 3))
    for node in (1, 2, 3):
        cluster.start(node)
    cluster.deliver_all(lose=lambda p: p.to == 1 and p.message.kind is Kind.COORDINATOR)
    assert cluster.role(1) is Role.AWAITING_COORDINATOR
    cluster.run(2.0)
    assert cluster.known_leaders() == {1: 3, 2: 3, 3: 3}


def test_partition_heals_into_one_leader():
    cluster = Cluster.of((1, 2, 3))
    cut = lose_between(2, 3)
    for node in (1, 2, 3):
        cluster.start(node)
    cluster.deliver_all(lose=lambda p: cut(p) or (p.to == 1 and p.sender == 3))
    cluster.run(2.0, lose=lambda p: cut(p) or {p.to, p.sender} == {1, 3})
    assert cluster.leaders() == {2, 3}, "with 3 cut off, 1 and 2 elect 2"
    cluster.run(3.0)
    assert cluster.leaders() == {3} and cluster.known_leaders() == {1: 3, 2: 3, 3: 3}


def test_node_restarting_mid_election_still_converges():
    cluster = _converged((1, 2, 3, 4))
    cluster.crash(4)
    while cluster.role(3) is not Role.ELECTING:
        cluster.run(0.05)
    cluster.crash(3)
    cluster.start(3)  # back before its answer timeout expired
    cluster.crash(1)
    cluster.run(0.1)
    cluster.start(1)
    cluster.run(MISSES * INTERVAL_S + ANSWER_TIMEOUT_S + COORDINATOR_TIMEOUT_S)
    assert cluster.leaders() == {3}
    assert cluster.known_leaders() == {1: 3, 2: 3, 3: 3}


def test_lossy_links_still_elect_the_highest():
    cluster = Cluster.of((1, 2, 3, 4, 5))
    for node in cluster.ids:
        cluster.start(node)
    counter = iter(range(10**6))
    cluster.run(5.0, lose=lambda packet: next(counter) % 3 == 0)  # a third of packets lost
    cluster.run(4.0)
    assert cluster.leaders() == {5}
    assert set(cluster.known_leaders().values()) == {5}


# --- outside evidence: a peer's heartbeat connection closed --------------------------------------


def test_follower_runs_an_election_at_once_when_its_leader_is_known_down():
    cluster = _converged()
    cluster.advance(0.01)
    cluster.apply(2, PeerDown(3))
    cluster.apply(1, PeerDown(2))  # not its leader: nothing
    assert cluster.role(2) is Role.ELECTING and cluster.role(1) is Role.FOLLOWER
    cluster.crash(3)
    cluster.run(ANSWER_TIMEOUT_S + 0.1)
    assert cluster.leaders() == {2}, "after one answer timeout, not the leader-silence window"
