"""chaos_verify's accounting on fake evidence: faults + starts + sightings -> heal records,
statistics, the round verdict and the tables."""

import pytest

from scripts.faults.chaos import ACTION_KILL, ACTION_PAUSE, Fault
from scripts.faults.victims import LEADER_KIND
from scripts.verify.heal import Sighting, Start, heal_records, heal_stats, kind_of
from scripts.verify.rounds import ChaosVerifyConfigError, RoundOptions, RoundResult
from scripts.verify.table import (
    fault_lines,
    faults_per_service,
    kind_stats,
    kind_table,
    round_table,
)


def fault(at, name, action=ACTION_KILL, leader=False):
    return Fault(at_s=at - 100.0, name=name, detail="x", action=action, wall_at=at,
                 leader=leader)


def seen(at, service, instance="", by="healthchecker-1"):
    return Sighting(at, service, instance, by)


def test_a_kill_heals_at_the_next_start_and_the_new_instance_first_heartbeat():
    heals = heal_records(
        [fault(100.0, "broker-1")],
        [Start(10.0, "broker-1"), Start(101.5, "broker-1"), Start(103.0, "broker-1"),
         Start(100.5, "broker-2")],
        [seen(20.0, "broker-1", "old"), seen(102.0, "broker-1", "new"),
         seen(102.5, "broker-1", "newer")])
    [heal] = heals
    assert heal.running_at == 101.5 and heal.serving_at == 102.0 and heal.healed
    assert heal.running_s == pytest.approx(1.5) and heal.serving_s == pytest.approx(2.0)
    assert heal.shared == 0


def test_an_old_instance_seen_again_after_the_fault_is_no_proof_of_serving():
    # A checker restarted after the fault logs SEEN for the instance it hears of, even the one
    # that was killed (a heartbeat sent before the kill, read late): only new instances count.
    [heal] = heal_records([fault(100.0, "client-1")], [Start(101.0, "client-1")],
                          [seen(50.0, "client-1", "a"), seen(100.5, "client-1", "a", "hc-2"),
                           seen(104.0, "client-1", "b")])
    assert heal.serving_at == 104.0


def test_a_probed_service_serves_at_its_first_answer_after_it_runs_again():
    [heal] = heal_records([fault(100.0, "spark-master")], [Start(102.0, "spark-master")],
                          [seen(50.0, "spark-master"), seen(101.0, "spark-master"),
                           seen(120.0, "spark-master")])
    assert heal.running_at == 102.0 and heal.serving_at == 120.0


def test_without_a_start_or_a_sighting_the_fault_is_not_healed():
    no_start, no_sighting = heal_records(
        [fault(100.0, "broker-1"), fault(100.0, "spark-worker-1")],
        [Start(99.0, "broker-1"), Start(101.0, "spark-worker-1")],
        [seen(99.5, "broker-1", "a"), seen(100.5, "spark-worker-1")])
    assert no_start.running_at is None and not no_start.healed
    assert no_sighting.running_at == 101.0 and no_sighting.serving_at is None
    assert not no_sighting.healed and no_sighting.serving_s is None


def test_a_fault_on_a_paused_instance_shares_its_heal_and_counts_from_its_own_time():
    heals = heal_records(
        [fault(100.0, "query-service", ACTION_PAUSE), fault(102.0, "query-service"),
         fault(110.0, "query-service")],
        [Start(104.0, "query-service"), Start(111.0, "query-service")],
        [seen(90.0, "query-service", "a"), seen(105.0, "query-service", "b"),
         seen(112.0, "query-service", "c")])
    paused, killed_while_paused, later = heals
    assert (paused.running_s, paused.serving_s, paused.shared) == (4.0, 5.0, 1)
    assert (killed_while_paused.running_s, killed_while_paused.shared) == (2.0, 0)
    assert (later.running_s, later.serving_s) == (1.0, 2.0)


def test_an_instance_killed_before_its_first_heartbeat_serves_only_through_the_next():
    first, second = heal_records(
        [fault(100.0, "broker-1"), fault(103.0, "broker-1")],
        [Start(101.0, "broker-1"), Start(104.0, "broker-1")],
        [seen(90.0, "broker-1", "a"), seen(105.0, "broker-1", "c")])
    assert (first.running_s, first.serving_s) == (1.0, 5.0)
    assert (second.running_s, second.serving_s) == (1.0, 2.0)


def test_the_leader_is_its_own_kind():
    assert kind_of(fault(1.0, "healthchecker-2", leader=True)) == LEADER_KIND
    assert kind_of(fault(1.0, "healthchecker-2")) == "healthchecker"
    assert kind_of(fault(1.0, "spark-worker-2")) == "spark-worker"


def sample_round(number=1, problems=(), error=None):
    heals = heal_records(
        [fault(100.0, "broker-1"), fault(105.0, "healthchecker-3", leader=True),
         fault(110.0, "client-1", ACTION_PAUSE), fault(115.0, "broker-2")],
        [Start(101.0, "broker-1"), Start(108.0, "healthchecker-3"), Start(114.0, "client-1")],
        [seen(102.0, "broker-1", "b"), seen(109.0, "healthchecker-3", "h"),
         seen(115.0, "client-1", "c")])
    return RoundResult(number, "project", heals, restarts=3, session_s=80.0,
                       problems=list(problems), error=error)


def test_statistics_count_kills_pauses_and_the_unhealed_and_take_median_and_max():
    stats = heal_stats(sample_round().heals)
    assert (stats.faults, stats.kills, stats.pauses, stats.unhealed) == (4, 3, 1, 1)
    assert stats.running_median_s == 3.0 and stats.running_max_s == 4.0
    assert stats.serving_median_s == 4.0 and stats.serving_max_s == 5.0
    empty = heal_stats([])
    assert empty.faults == 0 and empty.running_median_s is None


def test_a_round_passes_only_exact_and_fully_healed():
    unhealed = sample_round()
    assert unhealed.exact and not unhealed.passed
    assert [h.fault.name for h in unhealed.unhealed] == ["broker-2"]
    healed = RoundResult(2, "p", unhealed.heals[:3])
    assert healed.passed
    assert healed.kinds_hit == {"broker", LEADER_KIND, "client"}
    assert not RoundResult(3, "p", unhealed.heals[:3], problems=["q1 differs"]).passed
    assert not RoundResult(4, "p", unhealed.heals[:3], error="RoundError: timed out").passed


def test_the_tables_show_each_round_and_each_kind():
    results = [sample_round(1), sample_round(2, problems=["q4 differs"])]
    rounds = round_table(results)
    assert rounds[2].startswith("| 1 | 3 | 1 | broker-1 1k, broker-2 1k, client-1 1p, "
                                "healthchecker-3 1k | 3 | 3.0 / 4.0 | 4.0 / 5.0 | 1 | 80.0 "
                                "| yes |")
    assert rounds[3].endswith("| NO |")
    kinds = kind_stats(results)
    assert list(kinds) == ["client", LEADER_KIND, "broker"]
    assert (kinds["broker"].faults, kinds["broker"].unhealed) == (4, 2)
    assert kind_table(results)[2] == "| client | 2 | 0 | 2 | 0 | 4.0 / 4.0 | 5.0 / 5.0 |"
    assert faults_per_service([]) == "none"
    lines = fault_lines(results[0].heals)
    assert "healthchecker-3 (leader): running 3.0 s, serving 4.0 s" in lines[1]
    assert "NOT HEALED" in lines[3]


def test_round_options_are_checked():
    for bad in ({"interval_s": 0}, {"pause_ratio": 2}, {"victims": "all"},
                {"heal_wait_s": 0}, {"faults_min": -1}):
        with pytest.raises(ChaosVerifyConfigError):
            RoundOptions(**bad)
