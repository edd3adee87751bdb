"""The supervision state machine, stepped event by event with a fake clock: no sockets, no
sleeping. Phases (starting, up, dead, departed, unknown), start deadlines per kind, back-off, the
connection-lost fast path, stalls, hand-over to a new leader, and checkpoints."""

import pytest

from healthchecker.supervision import (
    Departed,
    Expected,
    Inspect,
    Inspected,
    Leadership,
    Lost,
    PeerState,
    Phase,
    Restart,
    RestartDone,
    Seen,
    SharedStateError,
    ShareState,
    Stalled,
    SupervisionConfig,
    SupervisionState,
    SupervisorCheckpointError,
    Tick,
    Transition,
    backoff_s,
    from_checkpoint,
    initial_state,
    shared_from_json,
    shared_to_json,
    step,
    to_checkpoint,
    to_shared,
)

CONFIG = SupervisionConfig(
    self_name="healthchecker-3",
    heartbeat_timeout_s=3.0,
    start_deadline_s=10.0,
    start_deadlines=(("spark-*", 60.0), ("query-service*", 60.0)),
    backoff_base_s=1.0,
    backoff_max_s=8.0,
    stable_after_s=30.0,
)


class Machine:
    """One node's supervision driven by hand: `at(t)` moves the fake clock, `on(event)` steps."""

    def __init__(self, config: SupervisionConfig = CONFIG, now: float = 0.0, leader=True):
        self.now = now
        self.state: SupervisionState = initial_state(config, now)
        self.actions: list = []
        if leader:
            self.on(Leadership(True))

    def at(self, now: float) -> "Machine":
        self.now = now
        return self

    def on(self, event) -> list:
        self.state, actions = step(self.state, event, self.now)
        self.actions += actions
        return actions

    def tick_until(self, end: float, step_s: float = 0.1) -> list:
        """Tick every `step_s` up to `end`; returns every action on the way."""
        actions = []
        while self.now < end - 1e-9:
            self.at(round(self.now + step_s, 6))
            actions += self.on(Tick())
        return actions

    def phase(self, name: str) -> Phase:
        return self.state.records[name].phase

    def restarts(self, actions=None) -> list[Restart]:
        return [a for a in (self.actions if actions is None else actions)
                if isinstance(a, Restart)]


def _up(machine: Machine, name: str, instance: str = "h:1") -> Machine:
    machine.on(Seen(name, instance))
    return machine


def _beat_until(machine: Machine, name: str, instance: str, end: float) -> None:
    """Tick every 0.1 s up to `end`, with a heartbeat from `instance` every second."""
    while machine.now < end - 1e-9:
        machine.tick_until(min(machine.now + 1.0, end))
        machine.on(Seen(name, instance))


# --- starting -> up -> silent -> restart ------------------------------------------------------


def test_up_service_silent_beyond_the_timeout_is_restarted_at_once():
    machine = _up(Machine(), "broker-1")
    assert machine.phase("broker-1") is Phase.UP
    for t in (1.0, 2.0):  # heartbeats keep it up
        machine.at(t).on(Seen("broker-1", "h:1"))
    assert machine.tick_until(5.0) == []  # silent for exactly the timeout: not yet
    actions = machine.tick_until(5.1)
    (restart,) = machine.restarts(actions)
    assert restart.name == "broker-1" and restart.attempt == 1 and restart.backoff_s == 0
    assert "no heartbeat from h:1 for 3.1s" in restart.cause
    assert Transition("broker-1", Phase.UP, Phase.DEAD, restart.cause) in actions
    assert ShareState() in actions, "the leader tells its peers at once"
    assert machine.phase("broker-1") is Phase.STARTING


# --- silent: frozen or merely slow (hung_timeout_s set) --------------------------------------

INSPECTING = SupervisionConfig(self_name="healthchecker-3", heartbeat_timeout_s=3.0,
                               hung_timeout_s=20.0)


def _silent(machine: Machine, name: str = "spark-master") -> Inspect:
    """`name` seen at 0, silent since: the leader's one Inspect just past the timeout."""
    _up(machine, name, "")
    assert machine.tick_until(3.0) == []
    actions = machine.tick_until(3.1)
    assert actions == [Inspect(name, 0.0)], actions
    assert machine.phase(name) is Phase.UP, "not dead until the answer"
    assert machine.tick_until(3.5) == [], "asked once per silence"
    return actions[0]


def test_a_silent_service_whose_process_is_frozen_is_restarted_at_once():
    machine = Machine(INSPECTING)
    inspect = _silent(machine)
    actions = machine.at(3.6).on(Inspected(inspect.name, inspect.silent_since, True,
                                           "pid 7 stopped"))
    assert machine.phase("spark-master") is Phase.DEAD
    assert "its process frozen: pid 7 stopped" in actions[0].reason
    (restart,) = machine.restarts(machine.on(Tick()))
    assert restart.name == "spark-master"


def test_a_silent_service_that_runs_is_slow_and_restarted_only_past_the_hung_timeout():
    machine = Machine(INSPECTING)
    inspect = _silent(machine)
    assert machine.at(3.6).on(Inspected(inspect.name, inspect.silent_since, False, "runs")) == []
    assert machine.tick_until(20.0) == [], "slow under load: no restart, no second question"
    assert machine.phase("spark-master") is Phase.UP
    (restart,) = machine.restarts(machine.tick_until(20.1))
    assert "while its process runs (hung timeout 20s)" in restart.cause


def test_a_slow_service_heard_again_is_up_and_a_new_silence_is_inspected_again():
    machine = Machine(INSPECTING)
    inspect = _silent(machine)
    machine.at(3.6).on(Inspected(inspect.name, inspect.silent_since, False, "runs"))
    assert machine.tick_until(9.0) == []
    machine.on(Seen("spark-master", ""))  # answered again at 9.0: it was slow
    assert machine.tick_until(12.0) == []
    assert machine.tick_until(12.1) == [Inspect("spark-master", 9.0)]
    stale = machine.at(12.2).on(Inspected("spark-master", 0.0, True, "about the old silence"))
    assert stale == [] and machine.phase("spark-master") is Phase.UP


@pytest.mark.parametrize("answer", [None, "no answer"])
def test_a_silent_service_is_dead_when_the_backend_cannot_tell_or_does_not_answer(answer):
    machine = Machine(INSPECTING)
    inspect = _silent(machine)
    if answer is None:
        machine.at(3.6).on(Inspected(inspect.name, inspect.silent_since, None, "no live process"))
        assert machine.phase("spark-master") is Phase.DEAD
    else:
        assert machine.tick_until(6.1) == [], "one more heartbeat timeout for the answer"
        actions = machine.tick_until(6.2)
        assert "no answer whether its process runs" in machine.restarts(actions)[0].cause


def test_a_follower_never_inspects_and_marks_a_silent_service_dead_past_the_hung_timeout():
    machine = _up(Machine(INSPECTING, leader=False), "spark-master", "")
    assert machine.tick_until(20.0) == []
    actions = machine.tick_until(20.1)
    assert [type(a) for a in actions] == [Transition] and machine.phase("spark-master") is \
        Phase.DEAD


def test_a_connection_lost_is_dead_at_once_even_with_inspection():
    machine = _up(Machine(INSPECTING), "broker-1")
    machine.at(1.0).on(Lost("broker-1", "h:1"))
    (restart,) = machine.restarts(machine.on(Tick()))
    assert restart.name == "broker-1"


def _restarted(machine: Machine, name: str = "spark-worker-1") -> float:
    """`name` up, lost and restarted (its restart confirmed): returns when it began STARTING."""
    _up(machine, name, "h:1")
    machine.at(1.0).on(Lost(name, "h:1"))
    (restart,) = machine.restarts(machine.on(Tick()))
    machine.at(1.5).on(RestartDone(name, ok=True))
    assert machine.phase(name) is Phase.STARTING
    return 1.5


def test_a_start_frozen_before_its_first_sign_of_life_is_restarted_at_the_inspection():
    machine = Machine(INSPECTING)
    since = _restarted(machine)
    assert machine.tick_until(since + 10.0) == [], "inspected once half the hung timeout went by"
    actions = machine.tick_until(since + 10.1)
    assert actions == [Inspect("spark-worker-1", since)], actions
    actions = machine.at(12.0).on(Inspected("spark-worker-1", since, True, "container paused"))
    (transition,) = actions
    assert (transition.previous, transition.phase) == (Phase.STARTING, Phase.DEAD)
    assert "frozen 10.5s after its restart, before its first sign of life: container paused" \
        in transition.reason
    (restart,) = machine.restarts(machine.on(Tick()))  # 49 s before its 60 s start deadline
    assert restart.attempt == 2
    assert machine.state.records["spark-worker-1"].start_misses == 0, "not a slow start"


def test_a_slow_start_that_runs_is_inspected_every_heartbeat_timeout_and_left_to_its_deadline():
    machine = Machine(INSPECTING)
    since = _restarted(machine)
    asked = []
    while machine.now < since + 60.0 - 1e-9:
        for action in machine.tick_until(min(machine.now + 0.5, since + 60.0)):
            assert isinstance(action, Inspect), action
            asked.append(machine.now)
            for frozen in (False, None):  # running, or not yet running: both wait on
                assert machine.on(Inspected(action.name, action.silent_since, frozen, "")) == []
    assert len(asked) == pytest.approx(5, abs=1), asked  # about one every 10 s
    assert len(machine.restarts()) == 1, "only the restart of the loss"
    (restart,) = machine.restarts(machine.tick_until(since + 60.2))
    assert "start deadline 60s" in restart.cause


def test_a_service_frozen_while_the_deployment_starts_is_restarted_at_the_inspection():
    machine = Machine(INSPECTING)
    machine.at(2.0).on(Expected(frozenset({"spark-master"}), observed_at=2.0))
    assert machine.phase("spark-master") is Phase.UNKNOWN
    actions = machine.tick_until(2.0 + 10.1)
    assert actions == [Inspect("spark-master", 2.0)], actions
    (transition,) = machine.at(12.5).on(Inspected("spark-master", 2.0, True, "stopped (T)"))
    assert (transition.previous, transition.phase) == (Phase.UNKNOWN, Phase.DEAD)
    assert "after this node learned of it" in transition.reason
    assert len(machine.restarts(machine.on(Tick()))) == 1


def test_an_answer_about_an_earlier_start_changes_nothing():
    machine = Machine(INSPECTING)
    since = _restarted(machine)
    machine.tick_until(since + 10.1)
    assert machine.at(12.0).on(Inspected("spark-worker-1", since - 1.0, True, "stale")) == []
    assert machine.phase("spark-worker-1") is Phase.STARTING


def test_a_follower_and_a_checker_without_inspection_never_inspect_a_start():
    for machine in (Machine(INSPECTING, leader=False), Machine()):
        _up(machine, "spark-worker-1", "h:1")
        machine.at(1.0).on(Lost("spark-worker-1", "h:1"))
        machine.on(Tick())
        machine.at(1.5).on(RestartDone("spark-worker-1", ok=True))
        assert [a for a in machine.tick_until(30.0) if isinstance(a, Inspect)] == []


def test_hung_timeout_below_the_heartbeat_timeout_is_refused():
    from healthchecker.supervision import SupervisionConfigError

    with pytest.raises(SupervisionConfigError, match="hung_timeout_s"):
        SupervisionConfig(self_name="x", heartbeat_timeout_s=3.0, hung_timeout_s=2.0)


def test_a_restarted_service_is_starting_until_its_first_heartbeat():
    machine = _up(Machine(), "broker-1")
    machine.at(1.0).on(Lost("broker-1", "h:1"))
    machine.on(Tick())
    machine.at(1.5).on(RestartDone("broker-1", ok=True, detail="pid 2"))
    record = machine.state.records["broker-1"]
    assert record.phase is Phase.STARTING and record.since == 1.5, "deadline from completion"
    assert machine.tick_until(9.0) == []  # starting: silence is expected, no timeout applies
    actions = machine.at(9.0).on(Seen("broker-1", "h:2"))
    assert machine.phase("broker-1") is Phase.UP
    assert Transition("broker-1", Phase.STARTING, Phase.UP,
                      "first sign of life 7.5s after the restart") in actions
    assert len(machine.restarts()) == 1


def _spark_worker_starting(machine: Machine, restarted_at: float = 1.5) -> Machine:
    """spark-worker-1 (a probed JVM, start deadline 60 s) up, refused, restarted at 1.5 s."""
    _up(machine, "spark-worker-1", "")
    machine.at(1.0).on(Lost("spark-worker-1", "", "probe refused 2 times in a row"))
    machine.on(Tick())
    machine.at(restarted_at).on(RestartDone("spark-worker-1", ok=True, detail="c1"))
    assert machine.phase("spark-worker-1") is Phase.STARTING
    return machine


def test_a_service_killed_again_while_starting_is_dead_at_the_next_listing_not_its_deadline():
    machine = _spark_worker_starting(Machine())
    names = frozenset({"spark-worker-1"})
    actions = machine.at(3.2).on(Expected(names, stopped=names, observed_at=3.1))
    assert machine.phase("spark-worker-1") is Phase.DEAD
    cause = "not running (exited) before its first heartbeat or answer"
    assert Transition("spark-worker-1", Phase.STARTING, Phase.DEAD, cause) in actions
    (restart,) = machine.restarts(machine.at(4.5).on(Tick()))
    assert restart.attempt == 2 and restart.backoff_s == 1.0, "a flap: back-off still applies"


@pytest.mark.parametrize("observed_at", [1.0, 1.5, 1.9, 2.0])
def test_a_listing_begun_before_the_restart_completed_proves_nothing(observed_at):
    # Restarted at 1.5; a listing begun up to 0.5 s later (the peers' tolerance, bound
    # included) may be about the same moment.
    machine = _spark_worker_starting(Machine())
    names = frozenset({"spark-worker-1"})
    assert machine.at(3.0).on(Expected(names, stopped=names, observed_at=observed_at)) == []
    assert machine.phase("spark-worker-1") is Phase.STARTING


def test_stopped_in_a_listing_kills_neither_an_up_nor_an_in_flight_service():
    machine = _up(Machine(), "broker-1")
    machine.on(Expected(frozenset({"broker-1"})))
    _up(machine, "broker-2").at(2.0).on(Lost("broker-2", "h:1"))
    machine.on(Tick())  # restart of broker-2 decided, not done: in flight
    assert machine.state.records["broker-2"].in_flight
    names = frozenset({"broker-1", "broker-2"})
    assert machine.at(5.0).on(Expected(names, stopped=names, observed_at=4.9)) == []
    assert machine.phase("broker-1") is Phase.UP, "an up service dies by its own evidence"
    assert machine.phase("broker-2") is Phase.STARTING


def test_an_unknown_service_listed_stopped_is_dead_now_not_at_its_start_deadline():
    """A checker restarted during start-up learns of a worker killed before it came up: the
    listing says it ran and is gone, so it is restarted now, not after a JVM's 60 s."""
    machine = Machine()
    machine.at(1.0).on(Expected(frozenset({"spark-worker-1"})))
    assert machine.phase("spark-worker-1") is Phase.UNKNOWN
    names = frozenset({"spark-worker-1"})
    assert machine.at(1.4).on(Expected(names, stopped=names, observed_at=1.3)) == [], (
        "a listing begun about when this node learned of it proves nothing yet")
    actions = machine.at(2.6).on(Expected(names, stopped=names, observed_at=2.5))
    cause = "not running (exited), never seen by this node"
    assert Transition("spark-worker-1", Phase.UNKNOWN, Phase.DEAD, cause) in actions
    (restart,) = machine.restarts(machine.at(2.7).on(Tick()))
    assert restart.name == "spark-worker-1" and restart.cause == cause


def test_connection_closed_without_goodbye_restarts_at_once():
    machine = _up(Machine(), "broker-1")
    machine.at(0.5).on(Lost("broker-1", "h:1"))
    assert machine.phase("broker-1") is Phase.DEAD
    (restart,) = machine.restarts(machine.on(Tick()))
    assert restart.cause == "heartbeat connection closed without a goodbye"


def test_losses_that_prove_nothing_are_ignored():
    machine = _up(Machine(), "broker-1", "h:2")
    machine.on(Lost("broker-1", "h:1"))  # an older instance's connection closing late
    machine.on(Lost("ghost", "h:9"))  # never seen
    assert machine.phase("broker-1") is Phase.UP and "ghost" not in machine.state.records
    machine.on(Lost("broker-1", "h:2"))
    machine.on(Tick())
    assert machine.phase("broker-1") is Phase.STARTING
    machine.at(0.2).on(Lost("broker-1", "h:2"))  # starting: no connection of its own yet
    assert machine.phase("broker-1") is Phase.STARTING and len(machine.restarts()) == 1


def test_the_replaced_instance_is_no_sign_of_life():
    machine = _up(Machine(), "broker-1", "h:1")
    machine.at(4.0).on(Tick())  # silent (paused): restart decided
    assert machine.phase("broker-1") is Phase.STARTING
    machine.at(4.1).on(Seen("broker-1", "h:1"))  # unpaused for its kill, beat once
    assert machine.phase("broker-1") is Phase.STARTING
    machine.at(4.5).on(Seen("broker-1", "h:2"))
    assert machine.phase("broker-1") is Phase.UP


def _late_start_restarted(machine: Machine) -> Machine:
    """broker-1 expected but silent past its 10 s start deadline (a slow machine): restart
    decided at 10.1 s; the late instance h:1 then beats once, before the restart kills it."""
    machine.on(Expected(frozenset({"broker-1"})))
    (restart,) = machine.restarts(machine.tick_until(10.1))
    assert "never seen by this node" in restart.cause
    machine.at(10.9).on(Seen("broker-1", "h:1"))
    assert machine.phase("broker-1") is Phase.UP
    return machine


@pytest.mark.parametrize(
    "end_of_the_late_instance",
    [Lost("broker-1", "h:1"), Departed("broker-1", "h:1"), "silent"],
    ids=["connection lost", "goodbye", "silent"],
)
def test_the_late_start_killed_by_its_own_restart_is_no_new_death(end_of_the_late_instance):
    machine = _late_start_restarted(Machine())
    if end_of_the_late_instance == "silent":
        machine.on(RestartDone("broker-1", ok=True))
        actions = machine.tick_until(14.5)
    else:
        actions = machine.at(11.0).on(end_of_the_late_instance)
        machine.on(RestartDone("broker-1", ok=True))
        actions += machine.tick_until(14.5)
    assert machine.phase("broker-1") is Phase.STARTING
    (back,) = [a for a in actions if isinstance(a, Transition)]
    assert "the instance seen during its restart was the replaced one" in back.reason
    machine.on(Seen("broker-1", "h:1"))  # nothing of the replaced instance counts any more
    assert machine.phase("broker-1") is Phase.STARTING
    machine.at(16.0).on(Seen("broker-1", "h:2"))
    assert machine.phase("broker-1") is Phase.UP
    assert len(machine.restarts()) == 1


def test_the_new_instance_missing_after_the_late_one_is_restarted_at_its_start_deadline():
    machine = _late_start_restarted(Machine())
    machine.at(11.0).on(Lost("broker-1", "h:1"))
    machine.on(RestartDone("broker-1", ok=True))
    assert machine.restarts(machine.tick_until(11.0 + 10.0)) == []
    (again,) = machine.restarts(machine.tick_until(21.2))
    assert "no sign of life" in again.cause and again.attempt == 2


def test_an_instance_beating_after_its_restart_was_confirmed_is_the_new_one():
    machine = _late_start_restarted(Machine())
    machine.on(RestartDone("broker-1", ok=True))
    machine.at(11.9).on(Seen("broker-1", "h:1"))  # alive after the restarter's kill: the new one
    assert not machine.state.records["broker-1"].seen_in_restart
    machine.at(12.0).on(Lost("broker-1", "h:1"))
    assert machine.phase("broker-1") is Phase.DEAD
    (again,) = machine.restarts(machine.at(13.2).on(Tick()))
    assert again.cause == "heartbeat connection closed without a goodbye"


def test_goodbye_means_no_restart_until_seen_again():
    machine = _up(Machine(), "client-1")
    machine.at(1.0).on(Departed("client-1", "h:1"))
    assert machine.phase("client-1") is Phase.DEPARTED
    assert machine.tick_until(100.0) == []
    machine.on(Seen("client-1", "h:2"))
    assert machine.phase("client-1") is Phase.UP


def test_followers_track_everything_but_never_restart():
    machine = _up(Machine(leader=False), "broker-1")
    machine.at(1.0).on(Lost("broker-1", "h:1"))
    assert machine.tick_until(60.0) == []
    assert machine.phase("broker-1") is Phase.DEAD, "known dead, waiting for a leader"
    machine.on(Leadership(True))
    (restart,) = machine.restarts(machine.on(Tick()))
    assert restart.name == "broker-1", "a new leader acts at once: no grace period"


def test_self_is_never_supervised():
    machine = Machine()
    machine.on(Seen("healthchecker-3", "h:1"))
    machine.on(Expected(frozenset({"healthchecker-3"})))
    assert machine.state.records == {}


# --- start deadlines per kind -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "deadline_s"),
    [("broker-1", 10.0), ("client-2", 10.0), ("spark-worker-1", 60.0), ("query-service", 60.0)],
)
def test_a_starting_service_is_restarted_only_when_it_misses_its_kinds_deadline(name, deadline_s):
    machine = _up(Machine(), name)
    machine.at(1.0).on(Lost(name, "h:1"))
    machine.on(Tick())
    machine.on(RestartDone(name, ok=True))
    assert machine.restarts(machine.tick_until(1.0 + deadline_s)) == []
    (again,) = machine.restarts(machine.tick_until(1.0 + deadline_s + 0.1))
    assert again.attempt == 2
    assert f"no sign of life {deadline_s + 0.1:.1f}s after its restart" in again.cause
    assert f"(start deadline {deadline_s:g}s)" in again.cause


def test_every_missed_start_deadline_doubles_the_next_up_to_the_cap():
    machine = _up(Machine(), "broker-1")
    machine.on(Lost("broker-1", "h:1"))
    machine.on(Tick())  # restart 1
    deadlines = []
    for _ in range(4):
        machine.on(RestartDone("broker-1", ok=True))
        started = machine.now
        while not machine.restarts(machine.tick_until(machine.now + 0.1)):
            pass  # starting, silent, until the deadline is missed and it is restarted again
        deadlines.append(round(machine.now - started - 0.1, 1))
    # 10 s, then doubled per miss: 20, 40, and 40 (the cap is 4x). The deadline runs from the
    # restart's completion; these restarts are far enough apart that no back-off applies.
    assert deadlines == [10.0, 20.0, 40.0, 40.0]
    machine.on(Seen("broker-1", "h:9"))
    assert machine.state.records["broker-1"].start_misses == 0, "reset once up"


def test_expected_but_never_seen_waits_for_the_start_deadline_of_its_kind():
    machine = Machine()
    machine.on(Expected(frozenset({"broker-2", "spark-master"})))
    assert machine.phase("broker-2") is Phase.UNKNOWN
    actions = machine.tick_until(10.1)
    assert [r.name for r in machine.restarts(actions)] == ["broker-2"]
    assert "never seen by this node" in machine.restarts(actions)[0].cause
    assert [r.name for r in machine.restarts(machine.tick_until(60.1))] == ["spark-master"]


def test_unknown_services_no_longer_expected_are_left_alone():
    machine = Machine()
    machine.on(Expected(frozenset({"client-1"})))
    machine.at(5.0).on(Expected(frozenset()))  # it ended on purpose (exit 0)
    assert machine.tick_until(100.0) == []


# --- back-off ---------------------------------------------------------------------------------


def test_backoff_formula():
    assert [backoff_s(CONFIG, n) for n in range(6)] == [0.0, 1.0, 2.0, 4.0, 8.0, 8.0]


def test_a_crash_looping_service_backs_off_exponentially_up_to_the_cap():
    machine = _up(Machine(), "broker-1")
    restart_times = []
    instance = 1
    while len(restart_times) < 7:
        machine.at(round(machine.now + 0.05, 2))
        machine.on(Lost("broker-1", f"h:{instance}"))  # it dies as soon as it is up
        if machine.restarts(machine.on(Tick())):
            restart_times.append(machine.now)
            machine.on(RestartDone("broker-1", ok=True))
            instance += 1
            machine.on(Seen("broker-1", f"h:{instance}"))
    gaps = [round(b - a, 2) for a, b in zip(restart_times, restart_times[1:], strict=False)]
    # The first re-restart is free (a killed service heals at once), then 1, 2, 4, 8 (cap), 8.
    assert gaps == [0.05, 1.0, 2.0, 4.0, 8.0, 8.0]
    assert [r.backoff_s for r in machine.restarts()] == [0, 1, 2, 4, 8, 8, 8]


def test_backoff_resets_after_a_stable_run():
    machine = _up(Machine(), "broker-1")
    for t, instance in ((1.0, 1), (1.1, 2), (3.0, 3)):
        _beat_until(machine, "broker-1", f"h:{instance}", t)
        machine.on(Lost("broker-1", f"h:{instance}"))
        machine.on(Tick())
        machine.on(RestartDone("broker-1", ok=True))
        machine.on(Seen("broker-1", f"h:{instance + 1}"))
    assert machine.state.records["broker-1"].flaps == 2
    _beat_until(machine, "broker-1", "h:4", 40.0)
    machine.on(Lost("broker-1", "h:4"))  # up for more than stable_after_s: a fresh failure
    (restart,) = machine.restarts(machine.on(Tick()))
    assert restart.backoff_s == 0 and machine.state.records["broker-1"].flaps == 0


def test_a_failed_restart_is_retried_after_a_backoff():
    machine = _up(Machine(), "broker-1")
    machine.on(Lost("broker-1", "h:1"))
    machine.on(Tick())
    machine.on(RestartDone("broker-1", ok=False, detail="RestartFailedError: engine down"))
    assert machine.phase("broker-1") is Phase.DEAD
    assert machine.restarts(machine.tick_until(0.9)) == []
    (retry,) = machine.restarts(machine.tick_until(1.1))
    assert "restart failed: RestartFailedError: engine down" in retry.cause


def test_the_replaced_instances_goodbye_during_a_failed_restarts_back_off_stops_no_retry():
    machine = _up(Machine(), "broker-1")
    machine.on(Lost("broker-1", "h:1"))
    (restart,) = machine.restarts(machine.on(Tick()))
    machine.on(RestartDone("broker-1", ok=False, detail="RestartFailedError: engine down"))
    assert machine.phase("broker-1") is Phase.DEAD
    # The instance the restart replaced says goodbye late (it was stopping as it was killed).
    assert machine.at(0.5).on(Departed("broker-1", "h:1")) == []
    assert machine.phase("broker-1") is Phase.DEAD
    (retry,) = machine.restarts(machine.tick_until(1.1))
    assert retry.name == "broker-1"


# --- the node's own stalls --------------------------------------------------------------------


def test_a_frozen_checker_does_not_blame_the_services_for_its_own_silence():
    machine = _up(Machine(), "broker-1")
    machine.tick_until(1.0)
    actions = machine.at(30.0).on(Tick())  # SIGSTOPped for 29 s, then resumed
    assert Stalled(pytest.approx(29.0)) in actions and machine.restarts(actions) == []
    machine.on(Seen("broker-1", "h:1"))  # the backlog of heartbeats arrives
    assert machine.tick_until(32.0) == []
    assert machine.phase("broker-1") is Phase.UP


# --- hand-over to a new leader ----------------------------------------------------------------


def _handover(leader: Machine, follower: Machine, sender: int = 3) -> list:
    entries = shared_from_json(shared_to_json(to_shared(leader.state, leader.now)))
    return follower.on(PeerState(sender, entries))


def test_a_new_leader_honours_the_start_deadline_its_predecessor_began():
    leader, follower = Machine(), Machine(now=1000.0, leader=False)  # another clock origin
    for machine in (leader, follower):
        _up(machine, "spark-worker-1")
    leader.at(5.0).on(Lost("spark-worker-1", "h:1"))
    leader.on(Tick())
    leader.at(5.5).on(RestartDone("spark-worker-1", ok=True))
    follower.at(1005.0).on(Lost("spark-worker-1", "h:1"))
    follower.at(1006.0)
    leader.at(6.0)
    _handover(leader, follower)
    record = follower.state.records["spark-worker-1"]
    assert record.phase is Phase.STARTING and record.since == pytest.approx(1005.5)
    assert record.restart_count == 1
    # The leader dies; the follower takes over and does not restart the starting JVM ...
    follower.on(Leadership(True))
    assert follower.restarts(follower.tick_until(1065.4)) == []
    # ... until its 60 s start deadline (from the predecessor's restart) has passed.
    (restart,) = follower.restarts(follower.tick_until(1065.6))
    assert restart.attempt == 2


def test_a_new_leader_inherits_the_backoff():
    leader, follower = Machine(), Machine(leader=False)
    for machine in (leader, follower):
        _up(machine, "broker-1")
    for t, instance in ((1.0, 1), (1.1, 2)):  # two quick deaths: the next waits 1 s
        leader.at(t).on(Lost("broker-1", f"h:{instance}"))
        leader.on(Tick())
        leader.on(RestartDone("broker-1", ok=True))
        leader.on(Seen("broker-1", f"h:{instance + 1}"))
        follower.at(t).on(Seen("broker-1", f"h:{instance + 1}"))
    _handover(leader.at(1.2), follower.at(1.2))
    assert follower.state.records["broker-1"].flaps == 1
    follower.on(Lost("broker-1", "h:3"))
    follower.on(Leadership(True))
    assert follower.restarts(follower.tick_until(2.0)) == []  # not before 1.1 + 1 s
    (restart,) = follower.restarts(follower.tick_until(2.2))
    assert (restart.attempt, restart.backoff_s) == (3, 2.0)


def test_a_restart_the_old_leader_never_confirmed_is_redone_at_once():
    leader, follower = Machine(), Machine(leader=False)
    for machine in (leader, follower):
        _up(machine, "broker-1")
    leader.at(1.0).on(Lost("broker-1", "h:1"))
    leader.on(Tick())  # decided, then killed before the restarter finished
    _handover(leader, follower.at(1.0))
    assert follower.phase("broker-1") is Phase.STARTING
    actions = follower.on(Leadership(True))
    assert Transition("broker-1", Phase.STARTING, Phase.DEAD,
                      "a restart the previous leader decided was never confirmed") in actions
    (restart,) = follower.restarts(follower.on(Tick()))
    assert restart.attempt == 2


def test_a_confirmed_restart_is_not_redone():
    leader, follower = Machine(), Machine(leader=False)
    for machine in (leader, follower):
        _up(machine, "broker-1")
    leader.at(1.0).on(Lost("broker-1", "h:1"))
    leader.on(Tick())
    _handover(leader, follower.at(1.0))  # in flight
    leader.at(1.3).on(RestartDone("broker-1", ok=True))
    _handover(leader, follower.at(1.3))  # confirmed
    follower.on(Leadership(True))
    assert follower.restarts(follower.tick_until(5.0)) == []


def test_peer_evidence_never_kills_what_we_see_alive_nor_revives_what_we_saw_die():
    peer, node = Machine(leader=False), Machine(leader=False)
    for machine in (peer, node):
        _up(machine, "a")
        _up(machine, "b")
    peer.at(1.0).on(Lost("a", "h:1"))  # the peer lost its connection to a (a partition)
    node.at(1.0).on(Lost("b", "h:1"))
    node.on(Seen("a", "h:1"))
    _handover(peer, node)
    assert node.phase("a") is Phase.UP and node.phase("b") is Phase.DEAD


def test_a_fresh_node_adopts_what_it_has_only_heard_of():
    peer = Machine(leader=False)
    _up(peer, "broker-1")
    _up(peer, "client-1")
    peer.at(2.0).on(Departed("client-1", "h:1"))
    peer.on(Seen("broker-1", "h:1"))
    peer.on(Expected(frozenset({"broker-2"})))
    fresh = Machine(now=2.5)
    _handover(peer.at(2.5), fresh)
    assert fresh.phase("broker-1") is Phase.UP and fresh.phase("client-1") is Phase.DEPARTED
    # Only heard of broker-1 (alive); a peer reports it dead: believe it.
    peer.at(2.6).on(Lost("broker-1", "h:1"))
    _handover(peer, fresh.at(2.6))
    assert fresh.phase("broker-1") is Phase.DEAD


def test_shared_state_is_bounded_and_checked():
    machine = Machine()
    for index in range(100):
        _up(machine, f"svc-{index}")
    assert len(to_shared(machine.state, 0.0)) == 48
    good = ["a", "up", 0, 0.5, 0, 0, 0, None, 0, 0]
    assert shared_from_json([good])[0].last_seen_age_s == 0.5
    for bad in ([["x"]], "nope", [["a", "up", -1, 0.5, 0, 0, 0, None, 0, 0]],
                [["a", "zombie", 0, 0.5, 0, 0, 0, None, 0, 0]],
                [["", "up", 0, 0.5, 0, 0, 0, None, 0, 0]],
                [["a", "up", 0, 0.5, True, 0, 0, None, 0, 0]],
                [["a", "up", 0, 0.5, 0, 0, 0, None, 0, 2]],
                [["a", "up", 0, None, 0, 0, 0, None, 0, 0]],
                [good] * 49):
        with pytest.raises(ValueError):
            shared_from_json(bad)


def test_a_peers_up_row_never_seen_is_refused_before_it_reaches_the_table():
    # Adopted, an UP record with no last sighting would stop the next tick (the expiry of UP
    # records reads it); the row is refused where peer state is read, like any malformed row.
    with pytest.raises(SharedStateError, match="no last-seen age"):
        shared_from_json([["broker-1", "up", 0, None, 0, 0, 0, None, 0, 0]])


# --- checkpoints ------------------------------------------------------------------------------


def test_checkpoint_round_trip_across_clocks():
    machine = _up(Machine(), "a")
    for t, instance in ((5.0, 1), (11.0, 2)):
        machine.at(t).on(Lost("a", f"h:{instance}"))
        machine.on(Tick())
        machine.on(RestartDone("a", ok=True))
        machine.on(Seen("a", f"h:{instance + 1}"))
    saved = to_checkpoint(machine.state, now=12.0, wall_now=1_000_012.0)
    # The new process has another monotonic origin, and 3 s passed while it restarted.
    records = from_checkpoint(saved, now=503.0, wall_now=1_000_015.0)
    record = records["a"]
    assert (record.phase, record.restart_count, record.flaps) == (Phase.UNKNOWN, 2, 1)
    assert record.last_restart_at == pytest.approx(503.0 - 4.0)  # restarted 4 wall seconds ago
    assert record.not_before == pytest.approx(503.0 - 4.0 + 1.0)
    # Restored but not expected by the restarter: dormant, its counts kept for when it shows.
    restored = Machine()
    restored.state = initial_state(CONFIG, 503.0, records)
    restored.at(503.0).on(Leadership(True))
    assert restored.tick_until(600.0) == []


@pytest.mark.parametrize("data", [{}, {"format": 99}, {"format": 2, "services": {"a": {}}}, []])
def test_bad_checkpoint_raises_named_error(data):
    with pytest.raises(SupervisorCheckpointError):
        from_checkpoint(data, now=0.0, wall_now=0.0)


def test_a_service_first_known_from_a_peer_is_logged_in_the_phase_the_peer_gave():
    """A node that hears of a service from a peer before its first heartbeat logs that phase
    then (seen in CI: the heartbeat that came next changed no phase, and this node never logged
    the service up at all)."""
    peer, node = Machine(), Machine(leader=False)
    _up(peer, "marker")
    actions = _handover(peer, node)
    assert Transition("marker", None, Phase.UP, "told by node 3") in actions
    assert node.phase("marker") is Phase.UP
    assert [a for a in node.on(Seen("marker", "h:1")) if isinstance(a, Transition)] == []
