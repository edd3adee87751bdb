"""The supervision's clocks at their edges: each deadline, timeout and interval checked on both
sides of its boundary, with clock values a float represents exactly (steps of 0.5 s), and the
durations each cause reports. Stepped by hand (test_supervision.py's `Machine`), no sleeping."""

from healthchecker.supervision import (
    Expected,
    Inspect,
    Inspected,
    Lost,
    Phase,
    RestartDone,
    Seen,
    Stalled,
    SupervisionConfig,
    Tick,
    Transition,
)
from tests.unit.healthchecker.test_supervision import INSPECTING, Machine, _restarted, _up


def test_the_late_instance_stays_up_until_silent_past_the_heartbeat_timeout():
    """Seen while its restart is in flight, it may be the replaced instance, but until it has
    been silent past the heartbeat timeout it is up like any other."""
    machine = Machine()
    machine.on(Expected(frozenset({"broker-1"})))
    (restart,) = machine.restarts(machine.tick_until(10.5, 0.5))  # unseen past its 10 s
    machine.on(Seen("broker-1", "h:1"))  # at 10.5, the restart in flight
    assert machine.tick_until(13.5, 0.5) == [], "silent exactly the timeout: still up"
    assert machine.phase("broker-1") is Phase.UP
    assert machine.tick_until(14.0, 0.5) == [Transition(
        "broker-1", Phase.UP, Phase.STARTING,
        "no heartbeat for 3.5s: the instance seen during its restart was the replaced one")]


def _silent_after_a_second(machine: Machine) -> None:
    """spark-master (instance h:1) beats at 0 and 1, then falls silent: the leader asks at 4.5,
    the first tick more than the 3 s heartbeat timeout after its last heartbeat."""
    _up(machine, "spark-master", "h:1")
    machine.at(1.0).on(Seen("spark-master", "h:1"))
    assert machine.tick_until(4.0, 0.5) == []
    assert machine.tick_until(4.5, 0.5) == [Inspect("spark-master", 1.0)]


def test_a_frozen_answer_reports_the_instance_and_how_long_it_was_silent():
    machine = Machine(INSPECTING)
    _silent_after_a_second(machine)
    actions = machine.at(5.0).on(Inspected("spark-master", 1.0, True, "pid 7 stopped"))
    assert actions == [Transition("spark-master", Phase.UP, Phase.DEAD,
                                  "no heartbeat from h:1 for 4.0s, its process frozen: "
                                  "pid 7 stopped")]


def test_the_leader_waits_one_heartbeat_timeout_for_the_answer_not_less():
    machine = Machine(INSPECTING)
    _silent_after_a_second(machine)
    assert machine.tick_until(7.5, 0.5) == [], "asked at 4.5: exactly 3 s without an answer"
    (restart,) = machine.restarts(machine.tick_until(8.0, 0.5))
    assert restart.cause == ("no heartbeat from h:1 for 7.0s, and no answer whether its "
                             "process runs (timeout 3s)")


def test_a_start_is_inspected_once_per_half_hung_timeout_and_not_sooner():
    """Half of a 7 s hung timeout is 3.5 s (not 3): asked the first tick more than 3.5 s after
    the restart completed, then again each time more than 3.5 s went by unanswered."""
    config = SupervisionConfig(self_name="healthchecker-3", heartbeat_timeout_s=3.0,
                               hung_timeout_s=7.0)
    machine = Machine(config)
    since = _restarted(machine)  # spark-worker-1, starting since 1.5 (start deadline 60 s)
    asked = []
    for half_seconds in range(4, 28):  # ticks at 2.0, 2.5, ... 13.5
        for action in machine.at(half_seconds / 2).on(Tick()):
            assert action == Inspect("spark-worker-1", since), action
            asked.append(machine.now)
    assert asked == [5.5, 9.5, 13.5]


def test_an_expected_service_unseen_dies_a_start_deadline_after_this_node_learned_of_it():
    """The deadline runs from when this node learned of it (5.0), not from its clock's origin;
    the missed deadline counts once, so the restarted service gets twice its deadline."""
    machine = Machine()
    machine.at(5.0).on(Expected(frozenset({"broker-2"})))
    assert machine.tick_until(15.0, 0.5) == [], "unseen exactly its 10 s deadline: not yet"
    (restart,) = machine.restarts(machine.tick_until(15.5, 0.5))
    assert restart.cause == "never seen by this node for 10.5s (start deadline 10s)"
    machine.on(RestartDone("broker-2", ok=True))  # starting since 15.5
    assert machine.restarts(machine.tick_until(35.5, 0.5)) == []
    (again,) = machine.restarts(machine.tick_until(36.0, 0.5))
    assert "no sign of life 20.5s after its restart (start deadline 20s)" in again.cause


def test_restarts_exactly_stable_after_s_apart_are_no_flap():
    machine = _up(Machine(), "broker-1")
    machine.at(1.0).on(Lost("broker-1", "h:1"))
    machine.on(Tick())  # restart 1, at 1.0
    machine.on(RestartDone("broker-1", ok=True))
    for half_seconds in range(3, 62):  # up and beating from 1.5 to 30.5
        machine.at(half_seconds / 2).on(Seen("broker-1", "h:2"))
        machine.on(Tick())
    machine.at(31.0).on(Lost("broker-1", "h:2"))  # ran the 30 s of stable_after_s
    (restart,) = machine.restarts(machine.on(Tick()))
    assert (restart.attempt, restart.backoff_s) == (2, 0.0)
    assert machine.state.records["broker-1"].flaps == 0


def test_a_stall_keeps_what_is_left_of_a_start_deadline_and_of_a_back_off():
    """The node's own 28 s freeze is added to every clock: broker-1 (starting) keeps the 10 s
    of its start deadline, broker-2 (its restart failed) the 1 s of its retry back-off."""
    machine = Machine()
    for name in ("broker-1", "broker-2"):
        _up(machine, name)
        machine.at(1.0).on(Lost(name, "h:1"))
    assert len(machine.restarts(machine.on(Tick()))) == 2
    machine.at(1.5).on(RestartDone("broker-1", ok=True))  # deadline at 11.5
    machine.on(RestartDone("broker-2", ok=False, detail="engine down"))  # retry at 2.5
    assert machine.restarts(machine.at(2.0).on(Tick())) == []
    actions = machine.at(30.0).on(Tick())
    assert Stalled(28.0) in actions and machine.restarts(actions) == []
    (retry,) = machine.restarts(machine.tick_until(30.5, 0.5))
    assert retry.name == "broker-2" and "restart failed: engine down" in retry.cause
    assert machine.restarts(machine.tick_until(39.5, 0.5)) == []
    (late,) = machine.restarts(machine.tick_until(40.0, 0.5))
    assert late.name == "broker-1" and "no sign of life 10.5s after its restart" in late.cause
