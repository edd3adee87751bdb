"""The simulator's checker (`raft_sim.py`), stepped by hand: packets delivered one at a time,
a crash placed between two actions of one step. No sleeping: simulated time only."""

import heapq

import pytest

from services.broker.replication.raft import LogChanged, Role
from tests.unit.broker.replication.raft_sim import NO_FAULTS, Simulation

FORMING_ROUNDS_MAX = 400


def _formed_cluster() -> tuple[Simulation, int, int]:
    """Three nodes with a leader whose NOOP every node committed; the network emptied (packets
    lost, which any network may do) so that every later packet is the test's. Returns the
    simulation, the leader and one follower."""
    sim = Simulation((1, 2, 3), seed=0, faults=NO_FAULTS)
    for _ in range(FORMING_ROUNDS_MAX):
        sim.round()
        leader = sim.current_leader()
        if leader is not None and all(n.state.commit >= 1 for n in sim.nodes.values()):
            break
    else:
        pytest.fail(f"no leader committed everywhere in {FORMING_ROUNDS_MAX} rounds")
    sim.network.clear()
    for node in sim.nodes.values():
        node.outstanding = None
    follower = min(n for n in sim.ids if n != leader)
    return sim, leader, follower


def _fetch_round_trip(sim: Simulation, follower: int) -> None:
    """The follower fetches from its leader; request and answer are delivered."""
    sim._maybe_fetch(sim.nodes[follower])
    while sim.network:
        sim._deliver(heapq.heappop(sim.network))


def test_a_commit_carried_out_before_a_crash_mid_step_is_checked():
    """Seed 17800 of test_any_mix_of_faults (5 nodes): the leader's step on a fetch advanced
    its commit over a topic DELETE, carried that out (the delete applied, the applied index
    persisted) and crashed before the step ended. Restarted, it took the applied index as its
    commit index (node.py does the same: a lower bound of a real commit). The checker, which
    recorded commits only at the end of a step, had never seen that entry committed, and
    check_all reported "5's committed prefix differs" -- a false alarm: the entry was held by
    a majority. The checker now records a commit as soon as it is carried out."""
    sim, leader_id, follower_id = _formed_cluster()
    leader = sim.nodes[leader_id]
    epoch = leader.state.epoch
    for payload in ("h1+t0", "h2-t0"):  # create topic t0, then delete it
        sim._append(leader, (epoch, payload))
        sim._step(leader, LogChanged(leader.view()))
    end = len(leader.journal)
    assert leader.state.commit == end - 2, "nothing new is committed before the follower has it"

    _fetch_round_trip(sim, follower_id)  # the follower appends both entries
    assert len(sim.nodes[follower_id].journal) == end

    # Its next fetch says it holds them: the leader commits both and applies the delete, then
    # dies before answering.
    sim.crash_next_step_after = 1
    _fetch_round_trip(sim, follower_id)
    assert not leader.up and leader.applied_persisted == end

    sim.restart(leader_id)
    assert leader.state.commit == end and leader.state.role is Role.FOLLOWER
    sim.check_all()  # before the fix: SafetyViolation "<leader>'s committed prefix differs"
    assert sim.committed[end - 2:] == [(epoch, "h1+t0"), (epoch, "h2-t0")]


def test_a_restart_with_a_commit_the_checks_never_saw_is_refused():
    """The guard behind the fix: a node may not come back with a commit index above what the
    checks saw of it, or the entries between would escape state machine safety."""
    sim, leader_id, _follower_id = _formed_cluster()
    leader = sim.nodes[leader_id]
    epoch = leader.state.epoch
    sim._append(leader, (epoch, "h1-t1"))
    sim._step(leader, LogChanged(leader.view()))
    assert leader.state.commit < len(leader.journal)
    sim.crash(leader_id)
    leader.applied_persisted = len(leader.journal)  # a commit no step of it carried out
    with pytest.raises(AssertionError, match="the checks saw"):
        sim.restart(leader_id)


def test_the_crash_hook_stops_a_step_between_its_actions():
    """`crash_next_step_after`: the actions before the crash are carried out, none after."""
    sim, leader_id, follower_id = _formed_cluster()
    leader = sim.nodes[leader_id]
    epoch = leader.state.epoch
    sim._append(leader, (epoch, "h1"))
    sim._step(leader, LogChanged(leader.view()))
    _fetch_round_trip(sim, follower_id)
    commit_before = leader.state.commit
    sim.crash_next_step_after = 0  # before its CommitAdvanced
    _fetch_round_trip(sim, follower_id)
    assert not leader.up and leader.applied == commit_before
    assert sim.crash_next_step_after is None
    assert sim.stats.crashes_mid_step == 1
