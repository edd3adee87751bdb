"""The health checker's metrics (healthchecker/metrics.py): death causes, heal times, the
collector's families from a fake node, and the `--metrics-listen` flag."""

from __future__ import annotations

import pytest

from healthchecker.__main__ import build_parser
from healthchecker.metrics import (
    CAUSE_CONNECTION_LOST,
    CAUSE_HEARTBEAT_TIMEOUT,
    CAUSE_NEVER_SEEN,
    CAUSE_OTHER,
    CAUSE_PEER,
    CAUSE_RESTART_FAILED,
    CAUSE_START_DEADLINE,
    CAUSE_UNCONFIRMED_RESTART,
    HEAL_BUCKETS_S,
    NodeMetrics,
    death_cause,
)
from healthchecker.supervision import (
    Departed,
    Leadership,
    Lost,
    PeerState,
    Phase,
    RestartDone,
    Seen,
    Tick,
    Transition,
)
from tests.unit.metrics_fakes import (
    checker_node,
    fake_checker_registry,
    families,
    histogram_values,
    sample_values,
)

HEAL = "healthchecker_heal_seconds"


@pytest.mark.parametrize(("event", "previous", "cause"), [
    (Lost("svc", "h:1"), Phase.UP, CAUSE_CONNECTION_LOST),
    (Tick(), Phase.UP, CAUSE_HEARTBEAT_TIMEOUT),
    (Tick(), Phase.STARTING, CAUSE_START_DEADLINE),
    (Tick(), Phase.UNKNOWN, CAUSE_NEVER_SEEN),
    (Tick(), None, CAUSE_OTHER),
    (RestartDone("svc", False, "no such container"), Phase.STARTING, CAUSE_RESTART_FAILED),
    (PeerState(3, ()), Phase.UP, CAUSE_PEER),
    (Leadership(True), Phase.STARTING, CAUSE_UNCONFIRMED_RESTART),
    (Seen("svc"), Phase.UP, CAUSE_OTHER),
])
def test_death_cause(event, previous, cause):
    assert death_cause(event, previous) == cause


def _step(metrics: NodeMetrics, event, previous, phase, at_s: float) -> None:
    metrics.on_transition(event, Transition("svc", previous, phase, "test"), at_s)


def test_heal_is_death_to_first_sign_of_life_after_the_restart():
    metrics = NodeMetrics()
    _step(metrics, Tick(), Phase.UP, Phase.DEAD, 10.0)
    _step(metrics, Tick(), Phase.DEAD, Phase.STARTING, 10.5)
    _step(metrics, Seen("svc"), Phase.STARTING, Phase.UP, 12.0)
    heal = histogram_values(metrics.heal_seconds)
    assert (heal[(f"{HEAL}_count", ())], heal[(f"{HEAL}_sum", ())]) == (1, 2.0)
    assert heal[(f"{HEAL}_bucket", (("le", "1.0"),))] == 0
    assert heal[(f"{HEAL}_bucket", (("le", "2.0"),))] == 1  # le: a heal on a bound is inside
    deaths, restarts = metrics.counts()
    assert deaths == {("svc", CAUSE_HEARTBEAT_TIMEOUT): 1}
    assert restarts == {}


def test_a_peer_restart_starts_the_heal_clock_too():
    metrics = NodeMetrics()
    _step(metrics, PeerState(3, ()), Phase.UP, Phase.STARTING, 5.0)
    _step(metrics, Seen("svc"), Phase.STARTING, Phase.UP, 5.25)
    assert histogram_values(metrics.heal_seconds)[(f"{HEAL}_sum", ())] == 0.25
    assert metrics.counts()[0] == {}  # no death seen here: the peer saw it


def test_back_before_its_restart_or_departed_is_no_heal():
    metrics = NodeMetrics()
    _step(metrics, Tick(), Phase.UP, Phase.DEAD, 1.0)
    _step(metrics, Seen("svc"), Phase.DEAD, Phase.UP, 2.0)  # a paused process resumed
    _step(metrics, Lost("svc"), Phase.UP, Phase.DEAD, 3.0)
    _step(metrics, Departed("svc"), Phase.DEAD, Phase.DEPARTED, 4.0)
    _step(metrics, Seen("svc"), Phase.DEPARTED, Phase.UP, 9.0)
    assert histogram_values(metrics.heal_seconds)[(f"{HEAL}_count", ())] == 0
    assert metrics.counts()[0] == {("svc", CAUSE_HEARTBEAT_TIMEOUT): 1,
                                   ("svc", CAUSE_CONNECTION_LOST): 1}


def test_a_clock_step_back_heals_in_zero_seconds():
    metrics = NodeMetrics()
    _step(metrics, Tick(), Phase.UP, Phase.DEAD, 10.0)
    _step(metrics, Tick(), Phase.DEAD, Phase.STARTING, 10.5)
    _step(metrics, Seen("svc"), Phase.STARTING, Phase.UP, 9.0)
    heal = histogram_values(metrics.heal_seconds)
    assert (heal[(f"{HEAL}_count", ())], heal[(f"{HEAL}_sum", ())]) == (1, 0.0)
    assert heal[(f"{HEAL}_bucket", (("le", "0.05"),))] == 1


def test_restarts_by_outcome():
    metrics = NodeMetrics()
    metrics.restarted("svc", ok=True)
    metrics.restarted("svc", ok=False)
    metrics.restarted("svc", ok=True)
    assert metrics.counts()[1] == {("svc", "ok"): 2, ("svc", "failed"): 1}


def test_collector_families():
    found = families(fake_checker_registry())
    assert sample_values(found["healthchecker_heartbeats_received"]) == {
        ("healthchecker_heartbeats_received_total", ()): 120}
    assert found["healthchecker_deaths_detected"].type == "counter"
    assert sample_values(found["healthchecker_deaths_detected"]) == {
        ("healthchecker_deaths_detected_total",
         (("cause", "connection_lost"), ("service", "svc"))): 1}
    assert sample_values(found["healthchecker_restarts_performed"]) == {
        ("healthchecker_restarts_performed_total", (("outcome", "ok"), ("service", "svc"))): 1}
    heal = sample_values(found["healthchecker_heal_seconds"])
    assert found["healthchecker_heal_seconds"].type == "histogram"
    assert heal[("healthchecker_heal_seconds_count", ())] == 1
    assert heal[("healthchecker_heal_seconds_sum", ())] == pytest.approx(1.5)
    assert heal[("healthchecker_heal_seconds_bucket", (("le", "1.0"),))] == 0
    assert heal[("healthchecker_heal_seconds_bucket", (("le", "2.0"),))] == 1
    bounds = [s.labels["le"] for s in found["healthchecker_heal_seconds"].samples
              if s.name == "healthchecker_heal_seconds_bucket"]
    assert bounds == [str(bound) for bound in HEAL_BUCKETS_S] + ["+Inf"]
    assert not any(name.endswith("_created") for name in found)
    restarts = sample_values(found["healthchecker_service_restarts"])
    assert restarts[("healthchecker_service_restarts_total", (("service", "svc"),))] == 1
    phases = {(s.labels["service"], s.labels["phase"]): s.value
              for s in found["healthchecker_service_phase"].samples}
    assert phases[("svc", "up")] == 1 and phases[("spark-master", "unknown")] == 1
    assert sum(phases.values()) == 2
    seen = found["healthchecker_service_last_seen_age_seconds"].samples
    assert [(s.labels["service"], round(s.value, 3)) for s in seen] == [("svc", 0.2)]


def test_election_families():
    found = families(fake_checker_registry())
    assert sample_values(found["healthchecker_elections"]) == {
        ("healthchecker_elections_total", ()): 2}
    roles = {s.labels["role"]: s.value for s in found["healthchecker_role"].samples}
    assert roles["follower"] == 1 and sum(roles.values()) == 1
    assert found["healthchecker_leader_id"].samples[0].value == 3
    dropped = {s.labels["reason"]: s.value
               for s in found["healthchecker_election_packets_dropped"].samples}
    assert dropped == {"replayed": 2, "unauthenticated": 1}


def test_no_leader_known_is_minus_one():
    node = checker_node()
    node.election_state = node.election_state.__class__(node.election_state.config)
    found = families(fake_checker_registry(node))
    assert found["healthchecker_leader_id"].samples[0].value == -1


ARGS = ["--node-id", "1", "--peers", "1@127.0.0.1:9001", "--listen", "127.0.0.1:9001",
        "--secret", "s", "--backend", "process"]


def test_metrics_listen_flag():
    assert build_parser().parse_args(ARGS).metrics_listen is None
    args = build_parser().parse_args([*ARGS, "--metrics-listen", "127.0.0.1:9401"])
    assert args.metrics_listen == ("127.0.0.1", 9401)


def test_bad_metrics_listen_exits_2_naming_the_flag(capsys):
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args([*ARGS, "--metrics-listen", "127.0.0.1:http"])
    assert exited.value.code == 2
    assert "--metrics-listen: MetricsListenError" in capsys.readouterr().err
