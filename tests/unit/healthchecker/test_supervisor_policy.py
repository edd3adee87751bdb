"""Restart policy: leader only, timeout, grace, new-leader grace, back-off, goodbye, checkpoint."""

import pytest

from healthchecker.monitor import SOURCE_HEARTBEAT, SOURCE_PROBE, Sighting
from healthchecker.supervisor import (
    SupervisorCheckpointError,
    SupervisorConfig,
    SupervisorState,
    backoff_s,
    decide,
    from_checkpoint,
    set_leadership,
    to_checkpoint,
)

CONFIG = SupervisorConfig(
    self_name="healthchecker-3",
    heartbeat_timeout_s=3.0,
    restart_grace_s=5.0,
    backoff_base_s=1.0,
    backoff_max_s=8.0,
    stable_after_s=30.0,
)


def _seen(name, at, **kwargs):
    defaults = dict(source=SOURCE_HEARTBEAT, first_known_at=0.0, instance="h:1", pid=1)
    return Sighting(name, last_seen_at=at, **{**defaults, **kwargs})


def _leader(since=0.0) -> SupervisorState:
    return set_leadership(SupervisorState(), True, since)


def test_followers_never_restart():
    state, decisions = decide(SupervisorState(), CONFIG, {"broker-1": _seen("broker-1", 0.0)}, 100)
    assert decisions == []


def test_new_leader_waits_a_full_grace_period_before_any_restart():
    sightings = {"broker-1": _seen("broker-1", 0.0)}
    state = _leader(since=50.0)
    _, decisions = decide(state, CONFIG, sightings, now=54.9)
    assert decisions == []
    _, decisions = decide(state, CONFIG, sightings, now=55.0)
    assert [d.name for d in decisions] == ["broker-1"]


def test_silence_above_timeout_restarts_with_a_cause():
    state = _leader()
    sightings = {"a": _seen("a", 10.0), "b": _seen("b", 12.5)}
    state, decisions = decide(state, CONFIG, sightings, now=13.01)
    assert [d.name for d in decisions] == ["a"]
    assert decisions[0].attempt == 1 and decisions[0].backoff_s == 0.0
    assert "no heartbeat from h:1 for 3.0s" in decisions[0].cause


def test_exactly_at_timeout_is_not_silent_yet():
    _, decisions = decide(_leader(), CONFIG, {"a": _seen("a", 10.0)}, now=13.0)
    assert decisions == []


def test_restart_is_followed_by_grace_then_restarts_again_if_still_silent():
    state = _leader()
    sightings = {"a": _seen("a", 10.0)}
    state, first = decide(state, CONFIG, sightings, now=14.0)
    assert len(first) == 1
    state, during_grace = decide(state, CONFIG, sightings, now=18.9)
    assert during_grace == []
    state, second = decide(state, CONFIG, sightings, now=19.0)
    assert [d.attempt for d in second] == [2]
    assert second[0].backoff_s == 1.0, "restarted again within stable_after_s: back off"


def test_a_restarted_service_that_heartbeats_is_left_alone():
    state = _leader()
    state, _ = decide(state, CONFIG, {"a": _seen("a", 10.0)}, now=14.0)
    _, decisions = decide(state, CONFIG, {"a": _seen("a", 20.0, instance="h:2")}, now=22.0)
    assert decisions == []


def test_flapping_service_backs_off_exponentially_up_to_the_cap():
    state = _leader()
    sightings = {"a": _seen("a", 0.0)}
    restart_times = []
    now = 0.0
    while len(restart_times) < 7:
        now = round(now + 0.1, 1)
        state, decisions = decide(state, CONFIG, sightings, now)
        restart_times += [now for _ in decisions]
    gaps = [round(b - a, 1) for a, b in zip(restart_times, restart_times[1:], strict=False)]
    # grace 5, then grace + back-off 1, 2, 4, 8 (cap), 8: restart n+1 waits for restart n's flaps
    assert gaps == [5.0, 6.0, 7.0, 9.0, 13.0, 13.0]
    assert state.records["a"].restart_count == 7


def test_backoff_resets_after_a_stable_run():
    state = _leader()
    state, _ = decide(state, CONFIG, {"a": _seen("a", 0.0)}, now=5.0)
    state, _ = decide(state, CONFIG, {"a": _seen("a", 0.0)}, now=11.0)
    assert state.records["a"].flaps == 1
    state, decisions = decide(state, CONFIG, {"a": _seen("a", 60.0)}, now=64.0)
    assert decisions[0].backoff_s == 0.0 and state.records["a"].flaps == 0


def test_goodbye_means_no_restart_and_self_is_never_restarted():
    sightings = {
        "client-1": _seen("client-1", 0.0, departed=True),
        "healthchecker-3": _seen("healthchecker-3", 0.0),
    }
    _, decisions = decide(_leader(), CONFIG, sightings, now=100.0)
    assert decisions == []


def test_probe_that_never_answered_and_expected_but_unseen_services():
    never = Sighting("spark-master", SOURCE_PROBE, first_known_at=2.0, last_seen_at=None)
    state = _leader(since=0.0)
    _, decisions = decide(state, CONFIG, {"spark-master": never}, now=5.5, expected=["broker-2"])
    assert {d.name for d in decisions} == {"spark-master", "broker-2"}
    by_name = {d.name: d.cause for d in decisions}
    assert "probe never answered" in by_name["spark-master"]
    assert "never seen" in by_name["broker-2"]


def test_losing_leadership_stops_restarts_and_regaining_restarts_the_grace():
    state = _leader(since=0.0)
    state = set_leadership(state, False, 10.0)
    assert state.leader_since is None
    state = set_leadership(state, True, 20.0)
    _, decisions = decide(state, CONFIG, {"a": _seen("a", 0.0)}, now=24.0)
    assert decisions == []
    assert set_leadership(state, True, 30.0).leader_since == 20.0


def test_backoff_formula():
    assert [backoff_s(CONFIG, n) for n in range(6)] == [0.0, 1.0, 2.0, 4.0, 8.0, 8.0]


def test_checkpoint_round_trip_across_clocks():
    state = _leader()
    sightings = {"a": _seen("a", 0.0)}
    state, _ = decide(state, CONFIG, sightings, now=5.0)
    state, _ = decide(state, CONFIG, sightings, now=11.0)
    saved = to_checkpoint(state, now=12.0, wall_now=1_000_012.0)
    # The new process has another monotonic origin, and 3 s passed while it restarted.
    restored = from_checkpoint(saved, now=503.0, wall_now=1_000_015.0)
    record = restored.records["a"]
    assert (record.restart_count, record.flaps) == (2, 1)
    assert record.last_restart_at == pytest.approx(503.0 - 4.0)  # restarted 4 wall seconds ago
    assert record.not_before == pytest.approx(503.0 - 4.0 + 5.0 + 1.0)
    assert restored.leader_since is None


@pytest.mark.parametrize("data", [{}, {"format": 99}, {"format": 1, "services": {"a": {}}}, []])
def test_bad_checkpoint_raises_named_error(data):
    with pytest.raises(SupervisorCheckpointError):
        from_checkpoint(data, now=0.0, wall_now=0.0)
