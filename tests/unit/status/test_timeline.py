"""The timeline (services/status/timeline.py): one death seen by every checker is one event,
role changes stay each checker's, the newest come first, and leader changes the status service
saw between polls become events."""

from __future__ import annotations

from services.status.poller import carry_forward
from services.status.timeline import (
    KIND_BROKER_LEADER,
    KIND_CHECKER_LEADER,
    Leaders,
    TimelineEvent,
    checker_events,
    merge,
    observed_changes,
)


def row(at_s: float, kind: str, service: str, detail: str = "") -> dict:
    return {"at_s": at_s, "kind": kind, "service": service, "detail": detail}


def test_one_death_seen_by_three_checkers_is_one_event_with_three_reporters():
    events = [*checker_events("healthchecker-1", [row(100.0, "death", "broker-2", "lost")]),
              *checker_events("healthchecker-2", [row(100.2, "death", "broker-2", "lost")]),
              *checker_events("healthchecker-3", [row(100.1, "death", "broker-2", "lost"),
                                                  row(100.3, "restart", "broker-2")])]
    restart, death = merge(events, dedup_window_s=5.0, events_max=10)
    assert (death.kind, death.at_s, death.detail) == ("death", 100.0, "lost")
    assert death.reporters == ("healthchecker-1", "healthchecker-3", "healthchecker-2")
    assert restart.kind == "restart"


def test_deaths_apart_in_time_or_from_one_checker_stay_apart():
    events = checker_events("healthchecker-1", [row(100.0, "death", "broker-2"),
                                                row(101.0, "death", "broker-2")])
    events += checker_events("healthchecker-2", [row(120.0, "death", "broker-2")])
    assert len(merge(events, dedup_window_s=5.0, events_max=10)) == 3


def test_role_changes_are_never_folded_and_the_newest_come_first_up_to_the_bound():
    events = [*checker_events("healthchecker-1", [row(10.0, "role", "healthchecker-1", "a")]),
              *checker_events("healthchecker-2", [row(10.1, "role", "healthchecker-1", "b")]),
              *checker_events("healthchecker-3", [row(float(t), "healed", f"s{t}")
                                                  for t in range(20, 25)])]
    merged = merge(events, dedup_window_s=5.0, events_max=6)
    assert [e.at_s for e in merged] == [24.0, 23.0, 22.0, 21.0, 20.0, 10.1]
    assert len(merge(events, dedup_window_s=5.0, events_max=100)) == 7


def test_leader_changes_between_polls_become_events():
    before = Leaders("broker-1", 3, "healthchecker-3")
    assert observed_changes(None, before, 5.0) == []
    assert observed_changes(before, before, 6.0) == []
    events = observed_changes(before, Leaders("broker-2", 4, "healthchecker-2"), 7.0)
    assert [(e.kind, e.service) for e in events] == [(KIND_BROKER_LEADER, "broker-2"),
                                                     (KIND_CHECKER_LEADER, "healthchecker-2")]
    assert "epoch 4" in events[0].detail and all(isinstance(e, TimelineEvent) for e in events)


def test_a_poll_that_saw_no_leader_is_not_a_change_of_leader():
    before = Leaders("broker-1", 3, "healthchecker-3")
    now = carry_forward(before, Leaders(None, None, None))
    assert now == before and observed_changes(before, now, 8.0) == []
