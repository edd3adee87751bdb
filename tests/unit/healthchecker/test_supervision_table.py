"""What the supervision table holds and shows: its bound, the checker's own name in it, and the
fields the status page reads (how long up, whether a restart is in flight). Stepped by hand
(test_supervision.py's `Machine`), no sleeping."""

from healthchecker.status import service_rows
from healthchecker.supervision import (
    SERVICES_MAX,
    Expected,
    Leadership,
    Lost,
    Phase,
    RestartDone,
    Seen,
    Tick,
    from_checkpoint,
    initial_state,
)
from tests.unit.healthchecker.test_supervision import CONFIG, Machine, _up


def test_the_table_holds_at_most_services_max_and_still_follows_those_it_holds():
    machine = Machine()
    names = [f"svc-{index:04d}" for index in range(SERVICES_MAX + 1)]
    machine.on(Expected(frozenset(names)))
    assert len(machine.state.records) == SERVICES_MAX
    assert machine.on(Seen(names[-1], "h:1")) == []  # the one left out
    assert len(machine.state.records) == SERVICES_MAX
    machine.on(Seen(names[0], "h:1"))
    assert machine.phase(names[0]) is Phase.UP


def test_a_table_restored_with_the_checkers_own_name_still_supervises_the_others():
    """`from_checkpoint` keeps every name the file holds, and a file written under another
    `--name` may hold this checker's: it is never restarted, and the services sorted after it
    are supervised as ever."""
    restarted_once = {"restart_count": 1, "flaps": 0, "start_misses": 0,
                      "last_restart_wall": None, "not_before_wall": None, "last_cause": "lost"}
    saved = {"format": 2, "services": {"healthchecker-3": restarted_once,
                                       "zz-worker": restarted_once}}
    machine = Machine(leader=False)
    machine.state = initial_state(CONFIG, 0.0, from_checkpoint(saved, 0.0, 1000.0))
    machine.on(Leadership(True))
    machine.on(Expected(frozenset({"healthchecker-3", "zz-worker"})))
    assert [r.name for r in machine.restarts(machine.tick_until(10.1))] == ["zz-worker"]
    assert machine.restarts(machine.tick_until(100.0)) == []


def test_an_up_service_is_up_since_it_came_up_not_since_its_last_heartbeat():
    machine = _up(Machine(), "broker-1")
    machine.at(1.0).on(Lost("broker-1", "h:1"))
    machine.on(Tick())
    machine.at(1.5).on(RestartDone("broker-1", ok=True))
    for t in (4.0, 5.0, 6.0):
        machine.at(t).on(Seen("broker-1", "h:2"))
    (row,) = service_rows(machine.state.records, {}, 6.5)
    assert (row["phase"], row["since_age_s"], row["last_seen_age_s"]) == ("up", 2.5, 0.5)


def test_a_failed_restart_shows_no_restart_in_flight_while_it_waits_to_retry():
    machine = _up(Machine(), "broker-1")
    machine.at(1.0).on(Lost("broker-1", "h:1"))
    machine.on(Tick())
    (row,) = service_rows(machine.state.records, {}, 1.0)
    assert row["restart_in_flight"]
    machine.on(RestartDone("broker-1", ok=False, detail="engine down"))
    (row,) = service_rows(machine.state.records, {}, 1.0)
    assert (row["phase"], row["restart_in_flight"]) == ("dead", False)
