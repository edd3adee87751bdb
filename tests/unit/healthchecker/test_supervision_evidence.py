"""Which signs count, and for which service: goodbyes and heartbeats of replaced instances,
answers and reports that come late, the restarter's listings, peers' words. Stepped by hand
(test_supervision.py's `Machine`), no sleeping."""

import pytest

from healthchecker.supervision import (
    Departed,
    Expected,
    Inspected,
    Leadership,
    Lost,
    Phase,
    RestartDone,
    Seen,
    Tick,
    Transition,
)
from tests.unit.healthchecker.test_supervision import (
    INSPECTING,
    Machine,
    _handover,
    _late_start_restarted,
    _silent,
    _up,
)


@pytest.mark.parametrize(("instance", "after_its_loss"), [
    ("h:1", Phase.STARTING),  # the late instance beating on: maybe still the replaced one
    ("h:2", Phase.DEAD),  # another instance: the restart's own, and its loss a death
])
def test_while_the_restart_is_in_flight_only_the_late_instance_may_be_the_replaced_one(
    instance, after_its_loss
):
    machine = _late_start_restarted(Machine())  # h:1 seen at 10.9, the restart in flight
    machine.at(11.5).on(Seen("broker-1", instance))
    machine.at(12.0).on(Lost("broker-1", instance))
    assert machine.phase("broker-1") is after_its_loss


def test_the_replaced_instances_goodbye_is_not_the_services():
    """The restarter stops the silent instance h:1 (its goodbye comes while the service is
    starting): the restart goes on. A goodbye from another instance is the service's own."""
    machine = _up(Machine(), "broker-1", "h:1")
    machine.at(4.0).on(Tick())  # silent: restart decided
    machine.at(4.1).on(Departed("broker-1", "h:1"))
    assert machine.phase("broker-1") is Phase.STARTING
    machine.on(RestartDone("broker-1", ok=True))
    machine.tick_until(5.0)
    machine.on(Departed("broker-1", "h:2"))  # the new instance, stopped on purpose
    assert machine.phase("broker-1") is Phase.DEPARTED
    assert machine.tick_until(30.0) == []


def test_a_goodbye_from_a_service_never_seen_is_recorded_and_left_alone():
    machine = Machine()
    actions = machine.on(Departed("client-9", "h:1"))
    assert actions == [Transition("client-9", None, Phase.DEPARTED,
                                  "said goodbye (stopped on purpose)")]
    assert machine.state.records["client-9"].instance == "h:1"
    machine.on(Expected(frozenset({"client-9"})))  # still listed: it ended, nobody killed it
    assert machine.tick_until(30.0) == []
    assert machine.phase("client-9") is Phase.DEPARTED


def test_an_answer_that_comes_after_the_goodbye_restarts_nothing():
    machine = Machine(INSPECTING)
    inspect = _silent(machine)  # spark-master silent since 0, asked at 3.1
    machine.at(3.6).on(Departed("spark-master"))
    answer = Inspected(inspect.name, inspect.silent_since, None, "no live process")
    assert machine.at(3.8).on(answer) == []
    assert machine.phase("spark-master") is Phase.DEPARTED
    assert machine.restarts(machine.on(Tick())) == []


def test_the_late_report_of_a_restart_a_peers_newer_one_superseded_changes_nothing():
    """Two leaders for a moment (an election under way) both restart broker-1; the peer's
    restart is the newer one. This node's own restarter then reports its restart failed: that
    restart is no longer this node's to retry."""
    node, peer = Machine(), Machine()
    for machine in (node, peer):
        _up(machine, "broker-1")
    node.at(1.0).on(Lost("broker-1", "h:1"))
    node.on(Tick())  # this node's restart, in flight
    peer.at(2.0).on(Lost("broker-1", "h:1"))
    peer.on(Tick())  # the peer's, one second later
    node.at(2.0).on(Tick())
    _handover(peer, node)
    assert not node.state.records["broker-1"].in_flight, "the peer's restart replaced ours"
    assert node.on(RestartDone("broker-1", ok=False, detail="engine down")) == []
    assert node.phase("broker-1") is Phase.STARTING
    assert node.restarts(node.tick_until(3.0)) == []


@pytest.mark.parametrize("heard_of_it_first", [False, True],
                         ids=["seen first", "heard of from a peer first"])
def test_a_peer_never_kills_a_service_this_node_saw_alive_itself(heard_of_it_first):
    """Even when the peer lost it after this node's one heartbeat from it (a partition)."""
    peer, node = Machine(leader=False), Machine(leader=False)
    _up(peer, "a")
    if heard_of_it_first:
        _handover(peer, node)
    node.at(0.5).on(Seen("a", "h:1"))
    peer.at(1.0).on(Lost("a", "h:1"))
    _handover(peer, node.at(1.0))
    assert node.phase("a") is Phase.UP


def test_a_restart_a_new_leader_redid_and_saw_done_is_not_redone_by_the_next():
    leader, follower, third = Machine(), Machine(leader=False), Machine(leader=False)
    for machine in (leader, follower, third):
        _up(machine, "broker-1")
    leader.at(1.0).on(Lost("broker-1", "h:1"))
    leader.on(Tick())  # decided, then the leader dies before it is done
    _handover(leader, follower.at(1.0))
    follower.on(Leadership(True))
    (redone,) = follower.restarts(follower.on(Tick()))
    follower.at(1.5).on(RestartDone("broker-1", ok=True))
    _handover(follower, third.at(1.5))  # then the follower dies too
    assert third.on(Leadership(True)) == []
    assert third.phase("broker-1") is Phase.STARTING


def test_a_listing_judges_each_service_on_its_own():
    """One listing names a service this node never heard of, an up one and two starting ones,
    one of them listed running: only the starting one listed stopped is dead."""
    machine = _up(Machine(), "broker-1")
    workers = ("spark-worker-1", "spark-worker-2")
    for name in workers:
        _up(machine, name, "")
        machine.at(1.0).on(Lost(name, "", "probe refused 2 times in a row"))
    assert len(machine.restarts(machine.on(Tick()))) == 2
    for name in workers:
        machine.at(1.5).on(RestartDone(name, ok=True))
    names = frozenset({"a-new", "broker-1", *workers})
    stopped = frozenset({"a-new", "broker-1", "spark-worker-1"})
    actions = machine.at(3.2).on(Expected(names, stopped=stopped, observed_at=3.1))
    assert [(a.name, a.phase) for a in actions] == [("spark-worker-1", Phase.DEAD)]
    assert machine.phase("spark-worker-2") is Phase.STARTING
    assert machine.phase("broker-1") is Phase.UP and machine.phase("a-new") is Phase.UNKNOWN
